"""The ledger of measurements and runs, and training callbacks."""
