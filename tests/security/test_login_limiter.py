"""The login limiter takes a token when an attempt starts, so parallel guesses from one
address are held to the bucket however many connections it opens (SCRAM first messages sent
on every connection before any proof, PLAIN on every connection at once), while a burst of
correct logins all get in; and OAUTHBEARER claims that are not finite numbers, or an expiry
too far away for an int64 lifetime, are handled as SASL outcomes."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kayak.broker.config import BrokerConfig
from kayak.broker.security.authenticator import INT64_MAX, SaslAuthenticator
from kayak.broker.security.listeners import parse_listeners
from kayak.broker.security.login_limiter import LoginLimiter
from kayak.broker.security.session import ConnectionSession
from kayak.protocol.sasl import ScramClient, encode_oauthbearer
from tests.broker.wire import WireClient
from tests.security.test_sasl_broker import (
    PASSWORD,
    SASL,
    add_users,
    authenticate,
    handshake,
    plain_login,
    sasl_settings,
    scram_login,
)
from tests.security.threaded_broker import ThreadedBroker

pytestmark = pytest.mark.timeout(90)

CONNECTIONS = 30
RATE_LIMITED = "too many failed logins"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the limiter on its own -------------------------------------------------------------------


def test_a_token_is_taken_up_front_and_given_back_on_success() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(burst=3, per_second=1.0, clock=clock)
    attempts = [limiter.try_acquire("a") for _ in range(3)]
    assert all(attempts) and limiter.in_flight("a") == 3
    assert limiter.try_acquire("a") is None  # three checks in flight: none left
    assert limiter.try_acquire("b") is not None  # per address
    first, second, third = attempts
    assert first is not None and second is not None and third is not None
    first.succeeded()
    first.succeeded()  # settled once only
    assert limiter.in_flight("a") == 2
    again = limiter.try_acquire("a")
    assert again is not None
    second.failed()
    third.failed()
    again.failed()
    assert limiter.try_acquire("a") is None and limiter.in_flight("a") == 0
    assert limiter.retry_after("a") == pytest.approx(1.0)
    clock.now += 1.0
    assert limiter.try_acquire("a") is not None


def test_an_abandoned_attempt_counts_as_failed() -> None:
    limiter = LoginLimiter(burst=1, per_second=1.0, clock=FakeClock())
    attempt = limiter.try_acquire("a")
    assert attempt is not None
    del attempt  # a connection closed between SCRAM's first message and its proof
    assert limiter.in_flight("a") == 0
    assert limiter.try_acquire("a") is None


def test_acquire_waits_for_attempts_in_flight_but_not_after_failures() -> None:
    async def scenario() -> None:
        limiter = LoginLimiter(burst=1, per_second=0.01, patience_s=5.0)
        holder = limiter.try_acquire("a")
        assert holder is not None
        waiting = asyncio.ensure_future(limiter.acquire("a"))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        holder.succeeded()  # its token comes back: the waiting login gets it
        attempt = await asyncio.wait_for(waiting, 1)
        assert attempt is not None
        attempt.failed()
        # The bucket was emptied by a failure: refused at once, no waiting.
        assert await asyncio.wait_for(limiter.acquire("a"), 0.5) is None

    asyncio.run(scenario())


# -- against the broker: parallel guesses ----------------------------------------------------


def run_all(work: Callable[[int], Any], n: int = CONNECTIONS) -> list[Any]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(work, range(n)))


def scram_guesses(bootstrap: str, mechanism: str) -> list[str]:
    """Every connection sends its first message; once all have an answer, every admitted
    one sends its proof (with a wrong password). What each was finally told."""
    barrier = threading.Barrier(CONNECTIONS, timeout=30)

    def guess(_: int) -> str:
        client = WireClient(bootstrap, timeout=20)
        try:
            assert handshake(client, mechanism).error_code == 0
            scram = ScramClient(mechanism, "alice", "guess")
            server_first = authenticate(client, scram.first_message())
            barrier.wait()
            if server_first.error_code:
                return server_first.error_message or ""
            answer = authenticate(client, scram.final_message(server_first.auth_bytes))
            assert answer.error_code == 58
            return answer.error_message or ""
        finally:
            client.close()

    return run_all(guess)


def plain_guesses(bootstrap: str) -> list[str]:
    def guess(_: int) -> str:
        client, answer = plain_login(bootstrap, "alice", "guess")
        client.close()
        assert answer.error_code == 58
        return answer.error_message or ""

    return run_all(guess)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_parallel_guesses_are_held_to_the_bucket(tmp_path: Path, mechanism: str) -> None:
    add_users(tmp_path / "data")
    with ThreadedBroker(tmp_path / "data", **sasl_settings()) as broker:
        assert broker.context is not None and broker.context.authenticator is not None
        limiter = broker.context.authenticator.limiter
        bootstrap = broker.bootstrap_servers_for(SASL)
        started = time.monotonic()
        if mechanism == "PLAIN":
            answers = plain_guesses(bootstrap)
        else:
            answers = scram_guesses(bootstrap, mechanism)
        elapsed = time.monotonic() - started
        checked = [a for a in answers if RATE_LIMITED not in a]
        # A password is checked only under a token: the burst, plus what refilled meanwhile.
        assert len(checked) <= limiter.burst + math.ceil(elapsed * limiter.per_second)
        assert len(checked) >= limiter.burst  # the burst itself was served
        assert all("authentication failed" in a for a in checked), checked
        assert limiter.in_flight("127.0.0.1") == 0
        # The bucket is empty: the right password is not looked at either...
        client, answer = plain_login(bootstrap, "alice", PASSWORD)
        client.close()
        assert answer.error_code == 58 and RATE_LIMITED in (answer.error_message or "")
        # ...until a token is back.
        time.sleep(limiter.retry_after("127.0.0.1") + 0.05)
        client, _, answer = scram_login(bootstrap, "SCRAM-SHA-512", "alice", PASSWORD)
        client.close()
        assert answer.error_code == 0


def test_a_burst_of_correct_logins_larger_than_the_bucket_all_get_in(tmp_path: Path) -> None:
    add_users(tmp_path / "data")
    with ThreadedBroker(tmp_path / "data", **sasl_settings()) as broker:
        bootstrap = broker.bootstrap_servers_for(SASL)

        def login(i: int) -> int:
            if i % 2:
                client, answer = plain_login(bootstrap, "alice", PASSWORD)
            else:
                client, _, answer = scram_login(bootstrap, "SCRAM-SHA-256", "alice", PASSWORD)
            client.close()
            return answer.error_code

        assert run_all(login) == [0] * CONNECTIONS


# -- OAUTHBEARER claims -----------------------------------------------------------------------


def token_with(claims_json: str) -> bytes:
    def b64(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    return encode_oauthbearer(f"{b64(json.dumps({'alg': 'none'}))}.{b64(claims_json)}.")


def oauth_login(claims_json: str, **config: Any) -> tuple[int, str | None, int]:
    settings = BrokerConfig(
        sasl_enabled_mechanisms=("OAUTHBEARER",), sasl_oauthbearer_unsecured=True, **config
    )
    authenticator = SaslAuthenticator(settings)
    listener = parse_listeners("SASL_PLAINTEXT://127.0.0.1:0")[0]
    session = ConnectionSession(listener, "127.0.0.1")
    assert authenticator.handshake(session, "OAUTHBEARER", 1).error_code == 0

    async def step() -> tuple[int, str | None, int]:
        result = await authenticator.authenticate(session, token_with(claims_json), 2, None)
        return result.error_code, result.error_message, result.session_lifetime_ms

    return asyncio.run(step())


@pytest.mark.parametrize("exp", ["NaN", "Infinity", "-Infinity", "true", '"9999999999"'])
def test_oauthbearer_exp_must_be_a_finite_number(exp: str) -> None:
    code, message, _ = oauth_login(f'{{"sub": "carol", "exp": {exp}}}')
    assert code == 58 and "'exp'" in (message or "")


def test_oauthbearer_iat_must_be_a_finite_number() -> None:
    code, message, _ = oauth_login(f'{{"sub": "carol", "exp": {time.time() + 60}, "iat": NaN}}')
    assert code == 58 and "'iat'" in (message or "")


@pytest.mark.parametrize("exp", ["1e300", "1e308", str(10**400)])
def test_a_far_away_expiry_is_clamped_to_an_int64_lifetime(exp: str) -> None:
    code, message, lifetime_ms = oauth_login(
        f'{{"sub": "carol", "exp": {exp}}}', connections_max_reauth_ms=0
    )
    assert (code, message) == (0, None)
    assert lifetime_ms == INT64_MAX
    # Bounded by connections.max.reauth.ms when that is set.
    code, _, lifetime_ms = oauth_login(
        f'{{"sub": "carol", "exp": {exp}}}', connections_max_reauth_ms=60_000
    )
    assert (code, lifetime_ms) == (0, 60_000)
