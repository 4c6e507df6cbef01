"""Diagnosis of tracked runs: findings, each with its evidence and what its fix is worth."""
