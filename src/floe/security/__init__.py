"""Who is on the other end, and what they may do: TLS contexts and certificate
principals (``tls``), SASL PLAIN and SCRAM exchanges (``scram``), the users' SCRAM
credentials replayed from the ``__floe_security`` journal (``users``).

Sans-I/O where it can be: the server's connections drive the exchanges, the broker's
handlers read and change the users. Nothing here imports ``broker/`` or ``server/``.
"""
