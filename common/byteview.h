/*
 * byteview.h - the one borrowed byte string of every layer: the wire codec
 * (rendezvous/proto), the rendezvous machine (rendezvous/rdzv), the agent
 * session (rendezvous/session) and the driver between them pass the same
 * type, so a key or value read from one goes to the next as it is.
 */
#ifndef DDP_COMMON_BYTEVIEW_H
#define DDP_COMMON_BYTEVIEW_H

#include <stddef.h>
#include <stdint.h>

/* A borrowed run of bytes; the owner of `data` says how long it lives. */
struct byteview {
	const uint8_t *data;
	size_t len;
};

#endif
