"""The analytic model: parameter counts, FLOPs, memory, step time, generation. No torch."""
