"""Many queries at once: study files swept over axes (sweep), on local processes or a Ray cluster
(ray_backend), and the charts drawn from a sweep's rows (plots)."""
