"""The broker's wire layer: listeners and sockets (``listeners``, ``transport``), one connection's request
loop (``connection``), authentication (``authentication``), the request registry and context handlers are
given (``dispatch``), and quota throttling (``throttling``). Handlers (``strata.broker.handlers``) sit on it
and reach the broker only through the services of ``strata.broker.services``."""
