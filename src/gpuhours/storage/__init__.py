"""Storage: budgets, checkpoint retention, cache eviction."""
