/*
 * proto_auth.c - HMAC-SHA-256 proofs and nonces of the agent-session
 * handshake (proto_auth.h), with libsodium.
 */
#include "proto_auth.h"

#include <errno.h>
#include <sodium.h>

#define LABEL_SERVER "ddp-rdzv/2 server"
#define LABEL_CLIENT "ddp-rdzv/2 client"

int proto_auth_init(void)
{
	return sodium_init() < 0 ? -EIO : 0;
}

void proto_auth_nonce(uint8_t out[PROTO_SESSION_NONCE_LEN])
{
	randombytes_buf(out, PROTO_SESSION_NONCE_LEN);
}

void proto_auth_proof(const void *token, size_t token_len, bool server,
		      const uint8_t client_nonce[PROTO_SESSION_NONCE_LEN],
		      const uint8_t server_nonce[PROTO_SESSION_NONCE_LEN],
		      uint8_t out[PROTO_SESSION_PROOF_LEN])
{
	/* The _init form takes a key of any length (HMAC hashes long ones). */
	crypto_auth_hmacsha256_state st;
	const char *label = server ? LABEL_SERVER : LABEL_CLIENT;
	crypto_auth_hmacsha256_init(&st, token, token_len);
	crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, sizeof(LABEL_SERVER) - 1);
	crypto_auth_hmacsha256_update(&st, client_nonce, PROTO_SESSION_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, server_nonce, PROTO_SESSION_NONCE_LEN);
	crypto_auth_hmacsha256_final(&st, out);
	sodium_memzero(&st, sizeof(st));
}

bool proto_auth_equal(const uint8_t a[PROTO_SESSION_PROOF_LEN],
		      const uint8_t b[PROTO_SESSION_PROOF_LEN])
{
	return crypto_verify_32(a, b) == 0;
}
