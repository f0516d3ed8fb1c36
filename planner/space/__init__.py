"""The search space: the validity rules a strategy must satisfy (rules), the knobs' domains the
solver searches with their stated caps and canonical forms (search_space), and the independent
raw-product enumeration that checks the solver (oracle)."""
