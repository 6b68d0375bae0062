/*
 * proto_auth.h - the agent-session handshake's cryptography (libsodium),
 * shared by the store server and the session client. docs/protocol.md,
 * "Agent sessions", describes the exchange:
 *
 *   client -> HELLO   Nc (32 random bytes)
 *   server -> Ns (32 random bytes): nothing that depends on the token
 *   client -> AUTH    Pc = HMAC-SHA-256(token, "ddp-rdzv/2 client" Nc Ns)
 *   server    checks Pc (else refuse and close)
 *   server -> Ps = HMAC-SHA-256(token, "ddp-rdzv/2 server" Nc Ns)
 *   client    checks Ps (else the store does not know the token: leave)
 *
 * The client proves first: a stranger who connects to a store gets no
 * HMAC of the token to test guesses against offline (only the store's
 * nonce), and the store answers with its proof only to a client that
 * proved the token. (Whoever records a whole handshake, or poses as the
 * store, does get a proof: hence PROTO_AUTH_TOKEN_MIN.) The labels keep a
 * proof of one side from ever being a valid proof of the other, and of the
 * first version's order ("ddp-rdzv/1"); fresh nonces on both sides keep
 * recorded proofs from being replayed. The token never crosses the
 * network; the traffic after the handshake is not encrypted (the token
 * authenticates who may join, it does not hide what they say).
 */
#ifndef DDP_RENDEZVOUS_PROTO_AUTH_H
#define DDP_RENDEZVOUS_PROTO_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* The shortest token accepted (bytes): a proof lets whoever holds it test
 * guesses of the token offline, so it must be too long to guess (16
 * random bytes; `head -c 32 /dev/urandom | base64` gives 44). */
#define PROTO_AUTH_TOKEN_MIN 16

/* Initialises libsodium (idempotent, thread-safe). Returns 0 or -EIO. */
int proto_auth_init(void);

/* Fills out with PROTO_SESSION_NONCE_LEN random bytes (randombytes_buf;
 * call proto_auth_init first). */
void proto_auth_nonce(uint8_t out[PROTO_SESSION_NONCE_LEN]);

/* The proof of the server side (server true) or the client side over the
 * two nonces, keyed with the token. */
void proto_auth_proof(const void *token, size_t token_len, bool server,
		      const uint8_t client_nonce[PROTO_SESSION_NONCE_LEN],
		      const uint8_t server_nonce[PROTO_SESSION_NONCE_LEN],
		      uint8_t out[PROTO_SESSION_PROOF_LEN]);

/* Constant-time comparison of two proofs. */
bool proto_auth_equal(const uint8_t a[PROTO_SESSION_PROOF_LEN],
		      const uint8_t b[PROTO_SESSION_PROOF_LEN]);

#endif
