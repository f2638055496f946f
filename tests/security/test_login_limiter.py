"""The login limiter delays failures and never refuses a correct password: a failure past the
budget (per address, per user name) is answered later and later and keeps its address's slot
until then, so parallel guesses from one address are held to the configured rate however many
connections it opens (SCRAM first messages sent on every connection before any proof, PLAIN on
every connection at once), while correct logins from that address get in beside them; and
OAUTHBEARER claims that are not finite numbers, or an expiry too far away for an int64
lifetime, are handled as SASL outcomes."""

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
from kayak.errors import ConfigError
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

pytestmark = pytest.mark.timeout(120)

CONNECTIONS = 30
REFUSED_FOR_NOW = "too many login attempts in progress"
# Fast enough that the tests do not wait long; the bound they check is relative to it.
LIMITER = {"login_failures_per_second": 4.0, "login_failures_burst": 10}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the limiter on its own -------------------------------------------------------------------


def test_a_check_takes_a_slot_and_a_success_gives_it_back_at_once() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(burst=3, per_second=1.0, max_in_flight=2, clock=clock)
    first, second = limiter.try_acquire("a"), limiter.try_acquire("a")
    assert first is not None and second is not None and limiter.in_flight("a") == 2
    assert limiter.try_acquire("a") is None  # two checks in flight: no slot left
    assert limiter.try_acquire("b") is not None  # per address
    first.succeeded()
    first.succeeded()  # settled once only
    assert limiter.in_flight("a") == 1
    again = limiter.try_acquire("a")
    assert again is not None
    again.succeeded()
    second.succeeded()
    assert limiter.in_flight("a") == 0 and limiter.failure_delay("a") == 0


def test_failures_past_the_budget_are_answered_later_and_hold_their_slot() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(burst=2, per_second=2.0, max_in_flight=10, clock=clock)
    delays = []
    for _ in range(5):
        attempt = limiter.try_acquire("a")
        assert attempt is not None
        delays.append(attempt.failed("alice"))
    assert delays == [0.0, 0.0, 0.5, 1.0, 1.5]  # 2 per second past the budget of 2
    assert limiter.in_flight("a") == 3  # the delayed failures keep their slots
    assert limiter.retry_after("a") == pytest.approx(2.0)  # until a failure is free again
    clock.now += 0.5
    assert limiter.in_flight("a") == 2
    # A correct password is not delayed and costs nothing, whatever came before it.
    right = limiter.try_acquire("a")
    assert right is not None
    right.succeeded()
    assert limiter.failure_delay("a") == pytest.approx(1.5)
    clock.now += 10
    assert limiter.in_flight("a") == 0 and limiter.failure_delay("a") == 0


def test_failures_for_one_user_are_delayed_from_any_address_up_to_a_cap() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(burst=2, per_second=1.0, max_user_delay_s=3.0, clock=clock)
    delays = []
    for i in range(8):
        attempt = limiter.try_acquire(f"10.0.0.{i}")  # a new address every time
        assert attempt is not None
        delays.append(attempt.failed("alice"))
    assert delays == [0.0, 0.0, 1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
    assert limiter.failure_delay("10.0.0.99", "bob") == 0  # another user is not slowed


def test_an_abandoned_attempt_frees_its_slot_without_a_charge() -> None:
    limiter = LoginLimiter(burst=1, per_second=1.0, max_in_flight=1, clock=FakeClock())
    attempt = limiter.try_acquire("a")
    assert attempt is not None
    del attempt  # a connection closed while its password was being checked
    assert limiter.in_flight("a") == 0 and limiter.failure_delay("a") == 0
    assert limiter.try_acquire("a") is not None


def test_logins_wait_in_line_for_a_slot_and_the_line_is_bounded() -> None:
    async def scenario() -> None:
        limiter = LoginLimiter(max_in_flight=1, max_waiting=2, patience_s=0.3)
        holder = limiter.try_acquire("a")
        assert holder is not None
        first = asyncio.ensure_future(limiter.acquire("a"))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(limiter.acquire("a"))
        await asyncio.sleep(0.01)
        assert limiter.waiting("a") == 2 and not first.done()
        # The line is full: a third login is refused at once, its password unchecked.
        assert not limiter.allows("a")
        assert await asyncio.wait_for(limiter.acquire("a"), 0.1) is None
        holder.succeeded()  # the slot goes to the first in line, not the second
        got = await asyncio.wait_for(first, 1)
        assert got is not None and not second.done()
        # The second waits no longer than its patience while the slot stays taken.
        assert await asyncio.wait_for(second, 2) is None
        got.succeeded()
        assert limiter.in_flight("a") == 0 and limiter.waiting("a") == 0

    asyncio.run(scenario())


def test_the_limiter_settings_are_checked() -> None:
    for name, value in [
        ("login_failures_burst", 0),
        ("login_failures_per_second", 0.0),
        ("login_max_in_flight_per_ip", 0),
    ]:
        with pytest.raises(ConfigError) as bad:
            BrokerConfig(**{name: value}).validate()
        assert bad.value.name == name.replace("_", ".")


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
def test_parallel_guesses_are_held_to_the_rate(tmp_path: Path, mechanism: str) -> None:
    add_users(tmp_path / "data")
    with ThreadedBroker(tmp_path / "data", **sasl_settings(**LIMITER)) as broker:
        assert broker.context is not None and broker.context.authenticator is not None
        limiter = broker.context.authenticator.limiter
        assert (limiter.burst, limiter.per_second) == (10, 4.0)  # as configured
        bootstrap = broker.bootstrap_servers_for(SASL)
        started = time.monotonic()
        if mechanism == "PLAIN":
            answers = plain_guesses(bootstrap)
        else:
            answers = scram_guesses(bootstrap, mechanism)
        elapsed = time.monotonic() - started
        checked = [a for a in answers if REFUSED_FOR_NOW not in a]
        # A wrong guess is answered no sooner than its address's budget allows: the burst,
        # plus what refilled meanwhile, however many connections guessed at once.
        assert len(checked) <= limiter.burst + math.ceil(elapsed * limiter.per_second)
        assert len(checked) >= limiter.burst  # the burst itself was served
        assert all("authentication failed" in a for a in checked), checked
        assert limiter.in_flight("127.0.0.1") == 0
        # The budget is spent, and the right password gets in all the same, at once.
        assert limiter.failure_delay("127.0.0.1") > 0
        client, answer = plain_login(bootstrap, "alice", PASSWORD)
        client.close()
        assert answer.error_code == 0, answer.error_message
        client, _, answer = scram_login(bootstrap, "SCRAM-SHA-512", "alice", PASSWORD)
        client.close()
        assert answer.error_code == 0, answer.error_message


def test_correct_logins_get_in_while_their_address_guesses_in_parallel(tmp_path: Path) -> None:
    add_users(tmp_path / "data")
    with ThreadedBroker(tmp_path / "data", **sasl_settings(**LIMITER)) as broker:
        assert broker.context is not None and broker.context.authenticator is not None
        limiter = broker.context.authenticator.limiter
        bootstrap = broker.bootstrap_servers_for(SASL)
        with ThreadPoolExecutor(1) as attacker:
            guessing = attacker.submit(plain_guesses, bootstrap)
            deadline = time.monotonic() + 30
            while limiter.failure_delay("127.0.0.1") == 0:  # until past the budget
                assert time.monotonic() < deadline and not guessing.done()
                time.sleep(0.01)
            client, answer = plain_login(bootstrap, "alice", PASSWORD)
            client.close()
            assert answer.error_code == 0, answer.error_message
            client, _, answer = scram_login(bootstrap, "SCRAM-SHA-256", "bob", "bob-secret")
            client.close()
            assert answer.error_code == 0, answer.error_message
            answers = guessing.result(60)
        assert all("authentication failed" in a for a in answers), answers


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
