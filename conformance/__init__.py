"""tgrad's conformance kit: an independent bit-exact oracle, case rosters and seeded fills.

- `conformance.oracle`: the numerics contract written as numpy code (numpy only, no libtgrad).
- `conformance.elementwise`: the elementwise ops' contract (correctly rounded bf16), the same way.
- `conformance.softmax`: softmax, log_softmax and logsumexp exactly (mpmath), rounded once.
- `conformance.fills`: seeded operand fills (normal, small integers, special values, ties, ...).
- `conformance.rosters`: named lists of cases (shape, views, fill, seed) and `build_operands`.
"""
