// Package cosign is the tlog witness side of annal's checkpoints (C2SP
// tlog-witness and tlog-cosignature): a witness that cosigns a log's
// signed checkpoints only as consistent extensions of the last one it
// cosigned for their origin, the client a log uses to ask it, and the
// policy a verifier applies (k of n witnesses cosigned).
//
// "Witness" here is a C2SP tlog witness: another party, over HTTP. It is
// not the durable witness of package engine (the durable head recorded in
// meta.db, docs/decisions/durable-witness.md); the docs say "tlog
// witness" where the two could be confused.
//
// A cosignature is a signature line of the checkpoint's signed note
// (C2SP signed-note), by an Ed25519 key of type 0x04:
//
//	— <witness name> base64(key ID ‖ timestamp ‖ signature)
//
//	key ID     4 bytes  SHA-256(<name> ‖ "\n" ‖ 0x04 ‖ public key)[:4]
//	timestamp  8 bytes  big-endian POSIX seconds, not zero
//	signature 64 bytes  Ed25519 over the message:
//
//	cosignature/v1
//	time <timestamp in decimal>
//	<the checkpoint's body: origin, size, root, extension lines>
//
// A witness key is written as a verifier key (vkey) "name+<key ID in 8
// hex digits>+base64(0x04 ‖ 32-byte public key)", and its private key,
// in the witness's directory, as "PRIVATE+KEY+name+<key ID>+base64(0x04 ‖
// 32-byte seed)".
//
// The witness's HTTP interface is tlog-witness's add-checkpoint:
//
//	POST /add-checkpoint
//
//	old <size the client believes the witness cosigned last>
//	<consistency proof hash, base64>   (0 to 63 lines)
//	<empty line>
//	<the signed checkpoint>
//
// 200: the cosignature line(s). 409 (text/x.tlog.size): the size it
// cosigned last, in decimal and a newline: ask again from there. 422: the
// proof does not verify (or the same size with another root): not a
// consistent extension. 403: not signed by a log key it trusts for the
// origin. 404: an origin of no log it knows. 400: a malformed request.
//
// Its state, per origin the size and root it cosigned last, is a text
// file in its directory, written and synced before it answers, with a
// log of the same lines beside it that catches the state file put back
// alone from an old copy: see StateFile, LogFile and Witness.
package cosign
