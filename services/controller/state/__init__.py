"""The controller's recovery state in Redis: keys, records, the lease and the one script runner."""
