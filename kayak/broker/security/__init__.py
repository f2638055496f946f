"""Who may connect and what they may do: listeners, TLS, SASL, credentials and ACLs.

Nothing here knows about sockets beyond building an ``ssl.SSLContext``; the connection code
asks a :class:`~kayak.broker.security.session.ConnectionSession` whether a request may run and
the :mod:`~kayak.broker.security.acls` authorizer whether its principal may do it.
"""
