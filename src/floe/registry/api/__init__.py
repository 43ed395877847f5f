"""The registry's HTTP edge: routes, request parsing, and the one error mapping."""
