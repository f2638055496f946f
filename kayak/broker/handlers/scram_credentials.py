"""DescribeUserScramCredentials and AlterUserScramCredentials: SCRAM users over the wire.

Both are operations on the cluster (DESCRIBE and ALTER). Answers follow Kafka's: one result
per user, RESOURCE_NOT_FOUND for an unknown user or a deletion of a credential that does not
exist, DUPLICATE_RESOURCE for a user named twice (for the same mechanism, when altering),
UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL for iterations outside 4096..16384 or an
empty name. One user's changes apply together or not at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field

from kayak.broker.context import RequestContext
from kayak.broker.security.acls.checks import allowed_on_cluster
from kayak.broker.security.acls.model import AclOperation
from kayak.broker.security.credentials import (
    MECHANISM_NAMES,
    MECHANISM_TYPES,
    UserChange,
    make_credential,
)
from kayak.errors import (
    ClusterAuthorizationFailedError,
    DuplicateResourceError,
    ResourceNotFoundError,
    SecurityDisabledError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from kayak.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from kayak.protocol.messages.alter_user_scram_credentials_response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from kayak.protocol.messages.describe_user_scram_credentials_request import (
    DescribeUserScramCredentialsRequest,
)
from kayak.protocol.messages.describe_user_scram_credentials_response import (
    CredentialInfo,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)
from kayak.protocol.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential

log = logging.getLogger(__name__)

_DENIED = ClusterAuthorizationFailedError.code


async def handle_describe_scram_credentials(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    if not allowed_on_cluster(ctx, AclOperation.DESCRIBE):
        return _describe_denied(request)
    store = ctx.broker.credentials
    known = store.users() if store is not None else {}
    if not request.users:  # null or empty: every user
        return DescribeUserScramCredentialsResponse(
            error_message=None, results=[_described(user, known[user]) for user in known]
        )
    names = [u.name for u in request.users]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            results.append(
                _describe_error(
                    name,
                    DuplicateResourceError.code,
                    "Cannot describe SCRAM credentials for the same user twice in a single "
                    f"request: {name}",
                )
            )
        elif name not in known:
            results.append(
                _describe_error(
                    name,
                    ResourceNotFoundError.code,
                    f"Attempt to describe a user credential that does not exist: {name}",
                )
            )
        else:
            results.append(_described(name, known[name]))
    return DescribeUserScramCredentialsResponse(error_message=None, results=results)


def _describe_denied(
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse:
    """CLUSTER_AUTHORIZATION_FAILED, per user rather than for the whole response.

    Kafka answers with a top-level error, but librdkafka (2.x, so confluent-kafka) frees
    the top-level error string it parsed, which points into static or stack memory: any
    top-level error kills the client process. A per-user error reaches every client intact;
    a request for all users gets one result with an empty user name.
    """
    names = dict.fromkeys(u.name for u in request.users or ()) or {"": None}
    message = "DESCRIBE on the cluster is not allowed"
    return DescribeUserScramCredentialsResponse(
        error_message=None,
        results=[_describe_error(name, _DENIED, message) for name in names],
    )


def _described(user: str, credentials: list[tuple[str, int]]) -> DescribeUserScramCredentialsResult:
    infos = [CredentialInfo(MECHANISM_TYPES[m], iterations) for m, iterations in credentials]
    return DescribeUserScramCredentialsResult(user, error_message=None, credential_infos=infos)


def _describe_error(user: str, code: int, message: str) -> DescribeUserScramCredentialsResult:
    return DescribeUserScramCredentialsResult(user, code, message)


@dataclass
class _UserAlteration:
    """One user's part of an AlterUserScramCredentials request, and what became of it."""

    upsertions: list[ScramCredential] = field(default_factory=list)
    deletions: list[str] = field(default_factory=list)
    error_code: int = 0
    error_message: str | None = None

    def fail(self, code: int, message: str) -> None:
        if not self.error_code:
            self.error_code, self.error_message = code, message


async def handle_alter_scram_credentials(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    users: dict[str, _UserAlteration] = {}
    for name in _named_users(request):
        users.setdefault(name, _UserAlteration())
    if not allowed_on_cluster(ctx, AclOperation.ALTER):
        for alteration in users.values():
            alteration.fail(_DENIED, "ALTER on the cluster is not allowed")
        return _alter_response(users)
    store = ctx.broker.credentials
    if store is None:
        for alteration in users.values():
            alteration.fail(SecurityDisabledError.code, "this broker keeps no SCRAM credentials")
        return _alter_response(users)
    _check_request(request, users)
    changes = [
        UserChange(name, tuple(a.upsertions), tuple(a.deletions))
        for name, a in users.items()
        if not a.error_code
    ]
    if changes:
        missing = await asyncio.to_thread(store.apply, changes)
        for name in missing:
            users[name].fail(
                ResourceNotFoundError.code,
                "Attempt to delete a user credential that does not exist",
            )
        for change in changes:
            if change.user not in missing:
                log.info(
                    "SCRAM credentials of %r altered by %s: upserted %s, deleted %s",
                    change.user,
                    ctx.session.principal if ctx.session is not None else "User:ANONYMOUS",
                    [c.mechanism for c in change.upsertions] or "-",
                    list(change.deletions) or "-",
                )
    return _alter_response(users)


def _named_users(request: AlterUserScramCredentialsRequest) -> list[str]:
    return [d.name for d in request.deletions] + [u.name for u in request.upsertions]


def _check_request(
    request: AlterUserScramCredentialsRequest, users: dict[str, _UserAlteration]
) -> None:
    """Per-user validation before anything is written."""
    seen = Counter(
        [(d.name, d.mechanism) for d in request.deletions]
        + [(u.name, u.mechanism) for u in request.upsertions]
    )
    for (name, _), count in seen.items():
        if count > 1:
            users[name].fail(
                DuplicateResourceError.code,
                "A user credential cannot be altered twice in the same request",
            )
    for deletion in request.deletions:
        alteration = users[deletion.name]
        mechanism = MECHANISM_NAMES.get(deletion.mechanism)
        if not deletion.name:
            alteration.fail(UnacceptableCredentialError.code, "Username must not be empty")
        elif mechanism is None:
            alteration.fail(UnsupportedSaslMechanismError.code, "Unknown SCRAM mechanism")
        else:
            alteration.deletions.append(mechanism)
    for upsertion in request.upsertions:
        _check_upsertion(upsertion, users[upsertion.name])


def _check_upsertion(upsertion: ScramCredentialUpsertion, alteration: _UserAlteration) -> None:
    mechanism = MECHANISM_NAMES.get(upsertion.mechanism)
    if not upsertion.name:
        alteration.fail(UnacceptableCredentialError.code, "Username must not be empty")
    elif mechanism is None:
        alteration.fail(UnsupportedSaslMechanismError.code, "Unknown SCRAM mechanism")
    elif upsertion.iterations < MIN_ITERATIONS:
        alteration.fail(
            UnacceptableCredentialError.code,
            f"Too few iterations: {upsertion.iterations} (at least {MIN_ITERATIONS})",
        )
    elif upsertion.iterations > MAX_ITERATIONS:
        alteration.fail(
            UnacceptableCredentialError.code,
            f"Too many iterations: {upsertion.iterations} (at most {MAX_ITERATIONS})",
        )
    else:
        try:
            credential = make_credential(
                upsertion.name,
                mechanism,
                salt=bytes(upsertion.salt),
                salted_password=bytes(upsertion.salted_password),
                iterations=upsertion.iterations,
            )
        except ValueError as exc:
            alteration.fail(UnacceptableCredentialError.code, str(exc))
        else:
            alteration.upsertions.append(credential)


def _alter_response(users: dict[str, _UserAlteration]) -> AlterUserScramCredentialsResponse:
    return AlterUserScramCredentialsResponse(
        results=[
            AlterUserScramCredentialsResult(name, a.error_code, a.error_message)
            for name, a in users.items()
        ]
    )
