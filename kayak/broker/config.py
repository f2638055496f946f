"""Broker settings, by Kafka's property names where Kafka has one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kayak.broker.log import FlushMode, LogConfig
from kayak.broker.security.listeners import Listener, SecurityProtocol
from kayak.errors import ConfigError

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """How one broker listens, stores and limits; defaults are kayak's embedded defaults."""

    data_dir: Path = Path("kayak-data")
    host: str = "127.0.0.1"
    port: int = 9092
    node_id: int = 0
    shard_count: int = 1  # broker processes sharing data_dir (kayak broker --shards N)
    advertised_host: str | None = None  # default: the address actually listened on
    flush: FlushMode = FlushMode.GROUP
    num_partitions: int = 1  # num.partitions
    auto_create_topics: bool = True  # auto.create.topics.enable
    socket_request_max_bytes: int = 100 * 1024 * 1024  # socket.request.max.bytes
    max_connections: int = 10_000  # max.connections
    log: LogConfig = field(default_factory=LogConfig)
    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    # The log cleaner (compaction of cleanup.policy=compact topics)
    log_cleaner_enable: bool = True  # log.cleaner.enable
    log_cleaner_threads: int = 1  # log.cleaner.threads (one worker process)
    log_cleaner_backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    # log.cleaner.dedupe.buffer.size: the offset map's memory (Kafka's default is 128 MiB;
    # kayak's is smaller for an embedded broker: more keys only mean more passes)
    log_cleaner_dedupe_buffer_size: int = 16 * 1024 * 1024
    log_cleaner_io_buffer_size: int = 512 * 1024  # log.cleaner.io.buffer.size
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # The schema registry's HTTP port (0: ephemeral); None: no registry. Shard 0 serves it.
    schema_registry_port: int | None = None
    schema_registry_host: str | None = None  # default: ``host``

    # -- security ---------------------------------------------------------------------------
    # listeners; empty: one PLAINTEXT listener on host:port
    listeners: tuple[Listener, ...] = ()
    # advertised.listeners; a listener not named here is advertised as it listens
    advertised_listeners: tuple[Listener, ...] = ()
    ssl_certificate_location: Path | None = None  # PEM certificate chain (TLS listeners)
    ssl_key_location: Path | None = None  # PEM private key
    ssl_key_password: str | None = None
    # PEM CA bundle; when set, TLS listeners require a client certificate signed by it
    # (ssl.client.auth=required) and its subject becomes the principal
    ssl_ca_location: Path | None = None
    sasl_enabled_mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    # Accept unsigned OAUTHBEARER tokens (Kafka's unsecured validator): development only.
    sasl_oauthbearer_unsecured: bool = False
    connections_max_reauth_ms: int = 0  # connections.max.reauth.ms; 0: no re-authentication
    # connection.failed.authentication.delay.ms: a failed login is answered after this delay
    connection_failed_authentication_delay_ms: int = 100
    # The failed-login limiter (kayak extensions, see broker/security/login_limiter.py): per
    # client address and per user, this many failures are answered without extra delay,
    # then failures are answered later and later, refilling at this rate; an address's
    # passwords are checked (or its failures held back) this many at once, others queue.
    login_failures_burst: int = 10  # login.failures.burst
    login_failures_per_second: float = 1.0  # login.failures.per.second
    login_max_in_flight_per_ip: int = 8  # login.max.in.flight.per.ip
    # sasl.server.max.receive.size: the largest request a SASL listener accepts from a client
    # that has not authenticated yet (then socket.request.max.bytes applies)
    sasl_server_max_receive_size: int = 524_288
    super_users: tuple[str, ...] = ()  # super.users, as principals: ("User:admin",)
    # allow.everyone.if.no.acl.found; None: true only when every listener is PLAINTEXT
    allow_everyone_if_no_acl_found: bool | None = None
    connections_max_idle_ms: int = 600_000  # connections.max.idle.ms
    max_connections_per_ip: int = 2**31 - 1  # max.connections.per.ip
    # A request whose first byte arrived must be complete within this (kayak extension).
    request_receive_timeout_ms: int = 30_000
    # Schema registry: HTTP basic authentication against the broker's SASL users; None: on
    # when the broker has any TLS or SASL listener. Writers may register and delete;
    # every authenticated user may read. Super users are writers.
    schema_registry_auth: bool | None = None
    schema_registry_writers: tuple[str, ...] = ()
    schema_registry_tls: bool = False  # serve HTTPS with the broker's certificate
    # Host names the registry's web server answers to when it asks for no password, besides
    # its own addresses and names (DNS rebinding); "*": any.
    schema_registry_allowed_hosts: tuple[str, ...] = ()

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError("port", f"{self.port} is not a TCP port")
        if self.schema_registry_port is not None and not 0 <= self.schema_registry_port <= 65535:
            raise ConfigError(
                "schema.registry.port", f"{self.schema_registry_port} is not a TCP port"
            )
        if not 0 <= self.node_id < self.shard_count:
            raise ConfigError("node.id", f"{self.node_id} is not a shard of {self.shard_count}")
        if self.num_partitions < 1:
            raise ConfigError("num.partitions", "must be at least 1")
        if self.socket_request_max_bytes < 1024:
            raise ConfigError("socket.request.max.bytes", "must be at least 1024")
        if self.sasl_server_max_receive_size < 1024:
            raise ConfigError("sasl.server.max.receive.size", "must be at least 1024")
        if self.max_connections < 1:
            raise ConfigError("max.connections", "must be at least 1")
        for mechanism in self.sasl_enabled_mechanisms:
            if mechanism not in SASL_MECHANISMS:
                raise ConfigError(
                    "sasl.enabled.mechanisms",
                    f"{mechanism!r} is not one of {', '.join(SASL_MECHANISMS)}",
                )
        if self.tls_needed and (
            self.ssl_certificate_location is None or self.ssl_key_location is None
        ):
            raise ConfigError(
                "ssl.certificate.location",
                "a TLS listener (SSL, SASL_SSL or an HTTPS schema registry) needs "
                "--ssl-certificate-location and --ssl-key-location",
            )
        self._validate_advertised_listeners()
        if self.connections_max_idle_ms < 1:
            raise ConfigError("connections.max.idle.ms", "must be at least 1")
        if self.max_connections_per_ip < 1:
            raise ConfigError("max.connections.per.ip", "must be at least 1")
        if self.request_receive_timeout_ms < 1:
            raise ConfigError("request.receive.timeout.ms", "must be at least 1")
        self._validate_login_limiter()
        if self.log_cleaner_threads != 1:
            raise ConfigError("log.cleaner.threads", "kayak runs one cleaner: must be 1")
        if self.log_cleaner_dedupe_buffer_size < 1024 * 1024:
            raise ConfigError("log.cleaner.dedupe.buffer.size", "must be at least 1048576")
        if self.log_cleaner_backoff_ms < 0 or self.log_cleaner_io_buffer_size < 1024:
            raise ConfigError(
                "log.cleaner.backoff.ms", "backoff must be ≥ 0 and io.buffer.size ≥ 1024"
            )
        self.log.validate()

    def _validate_login_limiter(self) -> None:
        if self.login_failures_burst < 1:
            raise ConfigError("login.failures.burst", "must be at least 1")
        if not self.login_failures_per_second > 0:
            raise ConfigError("login.failures.per.second", "must be more than 0")
        if self.login_max_in_flight_per_ip < 1:
            raise ConfigError("login.max.in.flight.per.ip", "must be at least 1")

    def _validate_advertised_listeners(self) -> None:
        protocols = {listener.protocol for listener in self.effective_listeners}
        for advertised in self.advertised_listeners:
            if advertised.protocol not in protocols:
                raise ConfigError(
                    "advertised.listeners",
                    f"{advertised}: there is no {advertised.name} listener in listeners",
                )
            if advertised.host in ("0.0.0.0", "::"):
                raise ConfigError(
                    "advertised.listeners",
                    f"{advertised}: advertise an address clients can reach, not {advertised.host}",
                )

    @property
    def effective_listeners(self) -> tuple[Listener, ...]:
        """The listeners to open: ``listeners``, or PLAINTEXT on host:port."""
        return self.listeners or (Listener(SecurityProtocol.PLAINTEXT, self.host, self.port),)

    @property
    def tls_needed(self) -> bool:
        return self.schema_registry_tls or any(
            listener.protocol.uses_tls for listener in self.effective_listeners
        )

    @property
    def secured(self) -> bool:
        """Whether any listener uses TLS or SASL (then nothing is open by default)."""
        return any(
            listener.protocol is not SecurityProtocol.PLAINTEXT
            for listener in self.effective_listeners
        )

    @property
    def allow_everyone_without_acls(self) -> bool:
        """allow.everyone.if.no.acl.found as set, or by default: open only when unsecured."""
        if self.allow_everyone_if_no_acl_found is not None:
            return self.allow_everyone_if_no_acl_found
        return not self.secured

    @property
    def registry_auth_required(self) -> bool:
        if self.schema_registry_auth is not None:
            return self.schema_registry_auth
        return self.secured
