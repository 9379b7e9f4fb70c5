"""Student's t, two-sided 95%: the 0.975 quantile every interval of tracekit uses (the diff's
run-to-run interval, the overhead A/B's interval over groups). Standard library only: the
device-side benches import it without polars."""

from __future__ import annotations

# t(0.975, df) for df = 1..30 (tables, 3 decimals); beyond, the Cornish-Fisher expansion
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
Z975 = 1.959964


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (df >= 1): the table to
    30, then the expansion to its second term (t(40) 2.021, t(60) 2.000, t(120) 1.980)."""
    if df < 1:
        msg = f"t975 needs df >= 1, got {df}"
        raise ValueError(msg)
    if df <= len(T975):
        return T975[df - 1]
    z = Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
