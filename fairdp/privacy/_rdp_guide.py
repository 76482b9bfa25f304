"""A fast float64 RDP curve of the sampled Gaussian mechanism, to steer the noise search.

dp-accounting evaluates the Mironov-Talwar-Zhang 2019 bound (its Sec. 3.3 series for fractional
orders, the binomial sum for integer ones) one order and one term at a time in Python: ~0.1-0.2 s
per curve at the rates fairdp's studies use, and a noise search evaluates a dozen curves. Here
are the same formulas over all orders at once with numpy, equal to dp-accounting's up to
rounding (tests/test_privacy_rdp_guide.py checks 1e-9 relative). They only *guide* the
bisection in ``fairdp.privacy._accounting``: each of its decisions near the target is taken by
dp-accounting itself, and the bracket it returns is certified by dp-accounting at both ends, so
no guarantee rests on this module.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS
from scipy import special

ORDERS = np.asarray(DEFAULT_RDP_ORDERS, dtype=np.float64)  # the orders dp-accounting's accountant uses
_MAX_TERMS_FRAC = 1000  # dp-accounting's _MAX_STEPS_LOG_A_FRAC: an order not converged by then is inf


def _log_comb(n, k):
    return special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)


def _log_a_int(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """log A_alpha for integer orders: log sum_i C(alpha, i) q^i (1-q)^(alpha-i) e^((i^2-i)/(2 s^2))."""
    counts = alphas.astype(np.int64) + 1
    starts = np.cumsum(counts) - counts  # each order's first term in the flat array of all terms
    alpha = np.repeat(alphas, counts)
    i = np.arange(counts.sum()) - np.repeat(starts, counts)
    terms = _log_comb(alpha, i) + i * math.log(q) + (alpha - i) * math.log1p(-q) + (i * i - i) / (2 * sigma**2)
    top = np.maximum.reduceat(terms, starts)
    return top + np.log(np.add.reduceat(np.exp(terms - np.repeat(top, counts)), starts))


def _log_a_frac(q: float, sigma: float, alphas: np.ndarray, block: int = 128) -> np.ndarray:
    """log A_alpha for fractional orders (Mironov, Talwar & Zhang 2019, Sec. 3.3): the two
    integrals' series, ``block`` terms of every order at a time, each order stopped at the
    term where dp-accounting stops it (both terms falling and 30 nats below the total)."""
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    a = alphas[:, None]
    result = np.full(alphas.shape, np.inf)
    open_ = np.ones(alphas.shape, dtype=bool)
    carry0 = carry1 = last0 = last1 = np.full(alphas.shape, -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        for first in range(0, _MAX_TERMS_FRAC, block):
            i = np.arange(first, min(first + block, _MAX_TERMS_FRAC), dtype=np.float64)[None, :]
            j = a - i
            log_coef = _log_comb(a, i)
            # dp-accounting's log(erfc(x) / 2) at x = (i - z0) / (sqrt(2) sigma) is log Phi((z0 - i) / sigma)
            s0 = log_coef + i * log_q + j * log_1mq + (i * i - i) / (2 * sigma**2) + special.log_ndtr((z0 - i) / sigma)
            s1 = log_coef + j * log_q + i * log_1mq + (j * j - j) / (2 * sigma**2) + special.log_ndtr((j - z0) / sigma)
            a0 = np.logaddexp.accumulate(np.hstack([carry0[:, None], s0]), axis=1)[:, 1:]
            a1 = np.logaddexp.accumulate(np.hstack([carry1[:, None], s1]), axis=1)[:, 1:]
            total = np.logaddexp(a0, a1)
            prev0 = np.hstack([last0[:, None], s0[:, :-1]])
            prev1 = np.hstack([last1[:, None], s1[:, :-1]])
            done = (s0 < prev0) & (s1 < prev1) & (np.maximum(s0, s1) < total - 30) & open_[:, None]
            hit = done.any(axis=1)
            rows = np.flatnonzero(hit)
            result[rows] = total[rows, done[rows].argmax(axis=1)]
            open_ &= ~hit
            if not open_.any():
                break
            carry0, carry1, last0, last1 = a0[:, -1], a1[:, -1], s0[:, -1], s1[:, -1]
    return result


def sampled_gaussian_rdp(q: float, sigma: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """RDP at ``orders`` of one step of the Poisson-sampled Gaussian mechanism (rate ``q``,
    noise multiplier ``sigma``); ``q = 1`` is the plain Gaussian mechanism."""
    if q == 0:
        return np.zeros(orders.shape)
    if sigma == 0:
        return np.full(orders.shape, np.inf)
    if q == 1:
        return orders / (2 * sigma**2)
    integer = orders == np.floor(orders)
    log_a = np.empty(orders.shape)
    log_a[integer] = _log_a_int(q, sigma, orders[integer])
    log_a[~integer] = _log_a_frac(q, sigma, orders[~integer])
    return log_a / (orders - 1)


def epsilon_from_rdp(rdp: np.ndarray, delta: float, orders: np.ndarray = ORDERS) -> float:
    """eps at ``delta`` of an RDP curve: Canonne, Kamath & Steinke 2020, Prop. 12, minimised over
    the orders, with dp-accounting's cases (a KL bound of 0 for a tiny divergence, no bound at
    orders up to 1.01)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = rdp + np.log1p(-1 / orders) - np.log(delta * orders) / (orders - 1)
    eps = np.where(orders > 1.01, eps, np.inf)
    eps = np.where((rdp < 0) | (delta**2 + np.expm1(-rdp) > 0), 0.0, eps)
    return max(0.0, float(np.min(eps)))
