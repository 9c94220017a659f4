"""The rendezvous protocol as an agent speaks it (rendezvous/framing.hpp, auth.hpp, frame_seal.hpp), for tests and
benchmarks that play an agent, or stand between one and its server, by hand: frames, the proofs, and the seals every
frame carries after the hello. A second implementation on purpose: a test that used ddprun's own code to make its
frames could not catch ddprun getting them wrong."""
import hashlib
import hmac
import json
import struct

PROTOCOL_VERSION = 2
TAG_BYTES = 32


def frame(payload):
    """A frame: the payload's length (4 bytes, big-endian), then the payload (bytes)."""
    return struct.pack(">I", len(payload)) + payload


def read_frame(recv_exactly):
    """The next frame's payload; `recv_exactly(n)` returns n bytes or raises."""
    (length,) = struct.unpack(">I", recv_exactly(4))
    return recv_exactly(length)


def hmac_sha256(key, message):
    return hmac.new(key, message, hashlib.sha256).digest()


def hello_mac(token, nonce, run_id):
    return hmac.new(token.encode(), f"ddprun-rdzv/1\n{nonce}\n{run_id}".encode(), hashlib.sha256).hexdigest()


def challenge_settings(challenge):
    """What the connection's proof covers besides the nonces (protocol.cpp challenge_settings)."""
    flag = lambda name: "1" if challenge.get(name) else "0"  # noqa: E731  (absent on the wire: false)
    return (f"{challenge['proto']} v{challenge['v']} heartbeat={challenge['heartbeat_interval_ms']}/"
            f"{challenge['heartbeat_timeout_ms']} munge={flag('munge')} resumable={flag('resumable')} "
            f"meets={flag('meets')}")


def connection_proof(token, server_nonce, agent_nonce, run_id, settings):
    message = f"ddprun-rdzv/2 connection\n{server_nonce}\n{agent_nonce}\n{settings}\n{run_id}"
    return hmac.new(token.encode(), message.encode(), hashlib.sha256).hexdigest()


class Seal:
    """One direction's frame seal: tag = HMAC-SHA256(key, sequence (8 bytes, big-endian) + payload)."""

    def __init__(self, token, server_nonce, agent_nonce, run_id, direction):
        label = f"ddprun-rdzv/2 frames {direction}\n{server_nonce}\n{agent_nonce}\n{run_id}"
        self.key = hmac_sha256(token.encode(), label.encode())
        self.sequence = 0

    def _tag(self, payload):
        return hmac_sha256(self.key, struct.pack(">Q", self.sequence) + payload)

    def seal(self, payload):
        tag = self._tag(payload)
        self.sequence += 1
        return payload + tag

    def open(self, sealed):
        """The payload without its tag, or None when the tag is not this sequence's."""
        payload, tag = sealed[:-TAG_BYTES], sealed[-TAG_BYTES:]
        if len(sealed) < TAG_BYTES or not hmac.compare_digest(self._tag(payload), tag):
            return None
        self.sequence += 1
        return payload


def join(send, recv_exactly, token, run_id, hello, agent_nonce="00112233445566778899aabbccddeeff"):
    """An agent's handshake on a connected socket: reads the challenge, asks for and checks the connection's proof,
    sends `hello` (a dict; type, version, run id and MAC filled in) sealed. Returns (challenge, out seal, in seal)."""
    challenge = json.loads(read_frame(recv_exactly))
    send(frame(json.dumps({"type": "prove", "nonce": agent_nonce}).encode()))
    proof = json.loads(read_frame(recv_exactly))
    expected = connection_proof(token, challenge["nonce"], agent_nonce, run_id, challenge_settings(challenge))
    if proof.get("proof") != expected:
        raise ConnectionError(f"the server did not prove this connection: {proof}")
    out = Seal(token, challenge["nonce"], agent_nonce, run_id, "agent")
    into = Seal(token, challenge["nonce"], agent_nonce, run_id, "server")
    message = {"type": "hello", "v": PROTOCOL_VERSION, "run_id": run_id,
               "mac": hello_mac(token, challenge["nonce"], run_id), **hello}
    send(frame(out.seal(json.dumps(message).encode())))
    return challenge, out, into
