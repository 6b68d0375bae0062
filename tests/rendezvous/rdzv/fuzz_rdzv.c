/*
 * fuzz_rdzv.c - libFuzzer target over the rendezvous' decoders
 * (rendezvous/rdzv/rdzv_codec.h). Every input is fed to the state, slot,
 * owner and world decoders; whatever one accepts must encode back to the same bytes
 * (the encodings are canonical), so a decoder that reads past its input,
 * accepts what the encoder would not write, or loses a field stops the run.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rdzv_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

static void same(const void *a, size_t alen, const uint8_t *b, size_t blen)
{
	if (alen != blen || memcmp(a, b, blen) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct rdzv_state st;
	struct rdzv_slot slot;
	struct rdzv_world_data w;
	struct rdzv_owner owner;
	char buf[RDZV_STATE_MAX + RDZV_SLOT_MAX + 2];
	if (rdzv_state_decode(data, len, &st) == 0) {
		int n = rdzv_state_encode(&st, buf, sizeof(buf));
		if (n < 0)
			abort();
		same(buf, (size_t)n, data, len);
	}
	/* Another version's state: never this version's, an older one's phase
	 * known. */
	int ver = rdzv_state_version_other(data, len, &st);
	if (ver == RDZV_STATE_VERSION || ver == 0 ||
	    (ver > 0 && ver < RDZV_STATE_VERSION && (st.gen == 0 || st.phase < RDZV_OPEN)))
		abort();
	if (rdzv_slot_decode(data, len, &slot) == 0) {
		int n = rdzv_slot_encode(&slot, buf, sizeof(buf));
		if (n < 0)
			abort();
		same(buf, (size_t)n, data, len);
	}
	if (rdzv_owner_decode(data, len, &owner) == 0) {
		int n = rdzv_owner_encode(&owner, buf, sizeof(buf));
		if (n < 0)
			abort();
		same(buf, (size_t)n, data, len);
	}
	if (rdzv_world_decode(data, len, RDZV_NODES_MAX, &w) == 0) {
		char *enc;
		size_t elen;
		if (rdzv_world_encode(w.gen, w.round, w.master_port, w.members, w.size, &enc,
				      &elen) < 0)
			abort();
		same(enc, elen, data, len);
		free(enc);
	}
	rdzv_world_data_release(&w);
	return 0;
}
