"""The API server emulator: `emulator` (the server, its HTTP routes and what tests call on it),
`store` (objects, resourceVersions, writes, garbage collection), `watches` (what a watch keeps
and streams), `selectors`, `patching`, `validation`, `kinds` (what is served), `discovery`,
`tables`, `errors` (Status answers), `authorizing` (RBAC and service account tokens),
`cluster_tls` (the in-cluster HTTPS listener's certificates) and `events` (Events served as
core v1 and events.k8s.io/v1)."""
