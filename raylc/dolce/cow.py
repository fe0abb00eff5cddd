"""EM-based MLE of (lambda, k) in the COW scenario (DOLCE Sections 3.2-3.4, Algorithm 1).

The mixture likelihood (Eq. 1) depends on an observation only through (problem i, span
length C_ij, outcome x_ij in {1, 0, IDK}), so the EM runs on counts per (problem, C) cell.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from raylc.dolce.cells import (
    CellFit,
    CellStats,
    cell_statistics,
    first_near_max,
    segment_positions,
)
from raylc.dolce.cover import cover_prob_partial
from raylc.dolce.placement import (
    BUDGET,
    FEW_BUDGET,
    FEW_COPIES,
    GRID,
    few_copies_loglik,
    few_copies_work,
    log_sum_exp,
    placement_logliks,
    placement_work,
)
from raylc.dolce.scenario import binarization_cut, miss_expr
from raylc.dolce.uncertainty import (
    dirichlet_mle,
    log_dirichlet_multinomial,
    log_pair_prior,
    marginal_from_parts,
    marginal_loglik,
)

__all__ = ["COWFit", "fit_cow_task", "NOT_COVERED", "OUTCOMES"]

#: Outcome order used for counts and for ``COWFit.noise_``.
OUTCOMES = ("1", "0", "IDK")
#: The task's P(1|N) values the posterior integrates over under evidence that stays put
#: (:meth:`COWFit.posterior_pairs`), one value per span class (:func:`span_class`).
NOISE_GRID = (0.01, 0.15, 0.5)
#: Noise variants per node of P_i(O) that the placement budgets count (:func:`_placement_cost`),
#: whatever their number: the budgets were set for five, and keep the same problems in the law.
BUDGET_VARIANTS = 5
#: Span classes with a P(1|N) of their own in the posterior: spans of at most one unit (C <= 1)
#: and longer ones (:func:`span_class`; 1 gives one P(1|N) for every span, the rule before).
SPAN_CLASSES = 2
#: Problems (the cheapest) on which the chain over the copies is tried first; when Eq. 3's pairs
#: beat every placement variant there by :data:`PROBE_MARGIN` nats of evidence, the task keeps
#: Eq. 3 alone (its spans are not a document's: the chain would cost time and change nothing).
PROBE_PROBLEMS = 16
PROBE_MARGIN = 10.0
#: Placement variants (values of P(1|N) per span class) whose evidence on those problems falls
#: more than this many nats below the best variant's are dropped before the other problems.
VARIANT_MARGIN = 10.0
#: ``COWFit.not_covered``: the oracle's outcome on a span without its evidence, fitted per task
#: (q(0), q(IDK) by EM) or always IDK (Eq. 3 as printed).
NOT_COVERED = ("fitted", "idk")

#: Entries per piece of the general terms (work arrays that stay in cache).
_CHUNK = 1 << 15


def span_class(C: np.ndarray) -> np.ndarray:
    """The span class of each length C, min(max(C - 1, 0), SPAN_CLASSES - 1): with two classes,
    0 for at most one unit (the closed book and one unit: nothing to mistake the evidence for)
    and 1 for several units."""
    return np.minimum(np.maximum(np.asarray(C, dtype=np.int64) - 1, 0), SPAN_CLASSES - 1)


def noise_variants(rest: np.ndarray) -> np.ndarray:
    """P(x|N) per posterior variant and span class, (V, :data:`SPAN_CLASSES`, 3): P(1|N) of each
    class on :data:`NOISE_GRID` independently (every combination), P(0|N) : P(IDK|N) = ``rest``."""
    grid = np.asarray(NOISE_GRID, dtype=np.float64)
    n1 = np.stack(np.meshgrid(*[grid] * SPAN_CLASSES, indexing="ij"), axis=-1).reshape(-1, SPAN_CLASSES)
    return np.concatenate([n1[..., None], (1.0 - n1)[..., None] * rest], axis=-1)


def _cell_term(n1, n0, ni, l1, l0, li) -> np.ndarray:
    """n_1 log p_1 + n_0 log p_0 + n_IDK log p_IDK, skipping n_x = 0 (0 log 0 = 0).

    One fixed expression for every cell, below or above lambda, so that two candidates with
    the same per-outcome probabilities get equal terms (ties stay exact ties). Unmasked
    unless some 0 * log 0 occurs (the products then agree up to the sign of a zero)."""
    t = n1 * l1
    t += n0 * l0
    t += ni * li
    if np.isnan(t.sum()):
        t = np.where(n1 > 0, n1 * l1, 0.0) + np.where(n0 > 0, n0 * l0, 0.0) + np.where(ni > 0, ni * li, 0.0)
    return t


def _jagged_layout(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Jagged row-major layout of groups of terms, for sequential per-group sums.

    Groups are ranked by ``sizes`` (their numbers of terms), largest first, ties in group
    order; row j of the layout holds the j-th term of every group with more than j terms, in
    rank order, so that row j belongs to ranks 0 .. (its length - 1). Returns ``order`` (rank
    -> group), ``rank`` (group -> rank) and ``ends`` (where each row ends in the layout)."""
    n_rows = int(sizes.max(initial=0))
    key = (n_rows - sizes).astype(np.int16 if n_rows < 2**15 else np.int64)  # small keys: radix sort
    order = np.argsort(key, kind="stable")
    rank = np.empty(sizes.size, dtype=np.int64)
    rank[order] = np.arange(sizes.size)
    row_len = sizes.size - np.cumsum(np.bincount(sizes, minlength=n_rows + 1))[:n_rows]
    return order, rank, np.cumsum(row_len)


def _row_spans(ends: np.ndarray, chunk: int = 0):
    """(lo, hi, a): the rows of a :func:`_jagged_layout` (cut into pieces of at most ``chunk``
    entries if ``chunk``); entries lo .. hi - 1 belong to ranks a .. a + hi - lo - 1."""
    start = 0
    for end in ends.tolist():
        for lo in range(start, end, chunk or max(end - start, 1)):
            yield lo, min(lo + chunk, end) if chunk else end, lo - start
        start = end


def _by_entry(by_rank: np.ndarray, ends: np.ndarray, plus_row: bool = False) -> np.ndarray:
    """Every entry of a :func:`_jagged_layout` from a per-group value indexed by rank (plus the
    entry's row j, the position of the term in its group, if ``plus_row``)."""
    out = np.empty(int(ends[-1]) if ends.size else 0, dtype=by_rank.dtype)
    for j, (lo, hi, _) in enumerate(_row_spans(ends)):
        out[lo:hi] = by_rank[: hi - lo]
        if plus_row:
            out[lo:hi] += j
    return out


def _add_rows(acc: np.ndarray, terms: np.ndarray, ends: np.ndarray) -> None:
    """acc[rank] += each term of a :func:`_jagged_layout`, row after row: every group's terms
    are added one at a time, in order, as by a sequential loop over the group."""
    for lo, hi, a in _row_spans(ends):
        acc[a : a + hi - lo] += terms[lo:hi]


class COWFit(CellFit):
    """Per-problem (lambda_i, k_i) of one task by EM over the COW mixture (Algorithm 1).

    Model (Section 3.2): x_ij comes from the noise component N (Eq. 2, one distribution
    P(x|N) shared by the task) with prior P_i(N), or from the hybrid oracle O (Eq. 4) with
    prior P_i(O): for C_ij < lambda the non-parametric P_nonpar,i(x|O; lambda) (shared by the
    problem's observations with C < lambda, Section 4), for C_ij >= lambda the parametric
    Eq. 3: P(1|O) = pi(lambda, k; L_i, C_ij), P(0|O) = 0, P(IDK|O) = 1 - pi (Appendix A.1).
    With ``not_covered="fitted"`` (the default) P(0|O) = (1 - pi) q(0), P(IDK|O) = (1 - pi) q(IDK)
    with q fitted per task, and the closed-book span C = 0 is never right under lambda >= 1
    (P(1|O) = 0 there; P_nonpar leaves out its right answers): docs/dolce.md, "Probes that do
    not follow the IDK instruction".

    Candidates (Section 4): Lambda_i = K_i = {C_ij}_j U {0, maxC_i + 1, L_i}, maxC_i the
    largest partial length C_ij < L_i (0 if the problem has none); pairs with k < 1 or
    k lambda > L_i are excluded. For lambda = 0 all k >= 1 tie (pi = 1).

    Each of the ``n_steps`` = T iterations runs, in Algorithm 1's order:
      (a) M-step noise: P(x|N) = sum_ij q_ij(N) 1[x_ij = x] / sum_ij q_ij(N);
      (b) for every problem and candidate lambda, P_nonpar,i(x|O; lambda) =
          sum_j q_ij(O) 1[x_ij = x, C_ij < lambda] / sum_j q_ij(O) 1[C_ij < lambda]; then
          (lambda_i*, k_i*) = argmax over valid pairs of
          sum_j log[P_ij(x_ij|O; lambda, k) P_i(O) + P(x_ij|N) P_i(N)] by brute force, with
          P_i(z) from the previous iteration (0.5 at t = 1); ties within 1e-10 (1 + |max|)
          (:data:`~raylc.dolce.cells.LL_TIE_RTOL`) go to the first pair in (lambda ascending,
          k ascending) order;
      (c) M-step priors: P_i(z) = sum_j q_ij(z) / |J_i| (Algorithm 1's extra 1[x_ij = x] in
          this line is a typo: the prior is the mean responsibility);
      (d) E-step: q_ij(N) = P(x_ij|N) P_i(N) / [P(x_ij|N) P_i(N) + P_ij(x_ij|O) P_i(O)] and
          q_ij(O) = 1 - q_ij(N) (the two duplicated q(z = IDK) lines of Algorithm 1 are a
          typo and dropped).
    Algorithm 1 assigns P_ij(x|O) = 1 to outcomes x != x_ij (exponent 0); only the observed
    outcome ever enters the likelihood and the q's, which is what is computed here.
    Initialisation: q_ij(z|x) = 0.5, P_i(z) = 0.5 (the posterior also runs the EM from a
    second start, :attr:`~raylc.dolce.cells.CellFit._posterior_starts`, and its runs pick step
    (b)'s pair by prior x marginal likelihood, :mod:`raylc.dolce.uncertainty`).

    Guards (no epsilon floors are used): 0/0 in P_nonpar (no oracle responsibility below
    lambda) gives P_nonpar = 0, leaving those observations to the noise component; 0/0 in the
    noise M-step (no noise responsibility at all) gives the uniform 1/3; a zero E-step
    denominator gives q_ij(N) = P_i(N) (posterior = prior). A zero mixture probability gives
    log 0 = -inf for that candidate. In exact arithmetic the last two cannot occur.

    Vectorization: a pair's objective sums one per-cell term n_1 log p_1 + n_0 log p_0 +
    n_IDK log p_IDK over the problem's cells in C order. The cells below lambda share P_nonpar
    (their partial sum is formed once per (problem, lambda)); the cells at or above lambda with
    C < L are laid out flat, one entry per (problem, lambda, k, cell), with pi computed once
    (Appendix A.1); the cell with C = L has pi = 1 and comes last. Entries whose term does not
    depend on pi (pi = 1, or only outcome 0 observed under ``not_covered="idk"``) take the
    per-cell term of pi = 1, so
    mathematically tied pairs (e.g. lambda = 0 and lambda = maxC_i + 1 when every answer below
    maxC_i + 1 is correct) add bitwise equal terms in the same order and tie exactly; of the k
    for a lambda whose cells above all have C = L only the first is scored (pairs tied through
    differently computed terms are caught by the tie tolerance of step (b)). The other
    entries take n_1 log(pi P_i(O) + a_1) + n_IDK log((1 - pi) q(IDK) P_i(O) + a_IDK), and with q
    fitted also n_0 log((1 - pi) q(0) P_i(O) + a_0) (a_x = P(x|N) P_i(N)): two logs per entry
    and step, three with q fitted (:meth:`_objective`). Every sum adds its terms one at a time in C order, as the
    per-observation loop does, with the terms stored in jagged rows (:func:`_jagged_layout`:
    row j holds the j-th term of every sum with more than j terms). Cost
    O(P |Lambda|^2 |cells|) time and memory per step.

    The :class:`~raylc.dolce.cells.CellFit` contract: hyperparameters ``n_steps`` (T) and
    ``threshold``; :meth:`fit` takes one task's observation table and binarizes its scores as
    :func:`raylc.dolce.scenario.binarize_scores` does (outcome 1 if score >= ``threshold`` for
    continuous metrics, >= 0.5 for binary ones; null = IDK); :meth:`fit_stats` takes
    :class:`~raylc.dolce.cells.CellStats` whose y1, y0, nidk are the counts of outcomes 1, 0,
    IDK per (problem, C) cell (duplicate cells are summed; cells with zero counts are no
    observations; float weights allowed). ``loglik_`` is the objective of step (b) at the final
    pair, ``prior_oracle_`` P_i(O) from the last step (c), ``noise_`` P(x|N) from the last (a).
    """

    scenario = "COW"
    _posterior_starts = (0.5, 0.1)

    def __init__(self, n_steps: int = 10, threshold: float = 0.5, tol: float = 0.0, max_steps: int = 1000,
                 uncertainty_steps: int = 0, not_covered: str = "fitted"):
        super().__init__(n_steps, tol, max_steps, uncertainty_steps)
        self.threshold = threshold
        self.not_covered = not_covered

    def _check_params(self) -> None:
        super()._check_params()
        if not np.isfinite(self.threshold):
            raise ValueError("threshold must be finite")
        if self.not_covered not in NOT_COVERED:
            raise ValueError(f"not_covered must be one of {', '.join(NOT_COVERED)}")

    def cell_stats(self, obs: pl.DataFrame) -> CellStats:
        """Counts of outcomes 1, 0, IDK per (problem, C) cell of the binarized scores."""
        return cell_statistics(obs, binarization_cut(obs, self.threshold))

    def posterior_pairs(self, obs: pl.DataFrame, run: "COWFit") -> list[dict]:
        """``run.pairs_`` (Eq. 3: every span's cover drawn afresh) and, per variant of P(1|N) (one
        value of :data:`NOISE_GRID` per span class, :func:`noise_variants`), the same pairs with
        ``placement_ll``: the marginal likelihood of each
        problem's spans under evidence that stays put (:mod:`raylc.dolce.placement`; P_i(O)
        integrated out, P(0|N) : P(IDK|N) and q the run's, the terms below lambda the
        Dirichlet-multinomial of the problem's own counts under the run's prior; past
        :data:`~raylc.dolce.placement.BUDGET` by the chain over the copies, and past
        :data:`~raylc.dolce.placement.FEW_BUDGET` NaN, so Eq. 3).
        The posterior weighs them all by their evidence over the task: a document's copies stay
        put, so its spans take the second law, and the grid integrates the task's P(1|N) out
        (Eq. 3's EM can explain the hits as noise when the probe never abstains). Where the chain
        is tried on :data:`PROBE_PROBLEMS` first, the variants more than :data:`VARIANT_MARGIN`
        nats of evidence behind the best there are dropped for the rest."""
        pairs = run.pairs_
        exact, few = _placement_cost(pairs, self.L_, self.lam_q_)
        exact = exact <= BUDGET
        live = np.flatnonzero(exact | (few <= FEW_BUDGET))
        if live.size == 0:  # long documents: nothing read
            return [pairs]
        ids = self.problems_.astype(str)
        x = pl.when(pl.col("score").is_null()).then(2).when(miss_expr(obs, self.threshold)).then(1).otherwise(0)
        spans = (obs.filter(pl.col("problem_id").cast(pl.String).is_in(pl.Series(ids[live]).implode()))
                 .select(pl.col("problem_id").cast(pl.String), "C", "start", x=x).sort("problem_id"))
        pid = np.searchsorted(ids, spans["problem_id"].to_numpy())
        C, start, xo = (spans[c].to_numpy() for c in ("C", "start", "x"))
        cuts = np.searchsorted(pid, np.arange(self.problems_.size + 1))
        rest = run.noise_[1:] / run.noise_[1:].sum() if run.noise_[1:].sum() > 0 else np.array([0.5, 0.5])
        noise = noise_variants(rest)  # (V, classes, 3)
        q = np.r_[0.0, run.not_covered_]  # q of outcome 1 is never used (a right answer is covered)
        rows = np.searchsorted(pairs["problem"], np.arange(self.problems_.size + 1))
        problems = [(int(self.L_[i]), int(self.lam_q_[i]), C[cuts[i]:cuts[i + 1]], start[cuts[i]:cuts[i + 1]],
                     xo[cuts[i]:cuts[i + 1]], pairs["lam"][rows[i]:rows[i + 1]], pairs["k"][rows[i]:rows[i + 1]],
                     bool(exact[i])) for i in live]
        closed_wrong = self.not_covered == "fitted"
        parts: list = [None] * live.size
        chained = np.flatnonzero(~exact[live])
        if chained.size > PROBE_PROBLEMS:  # try the chain on a few problems first (PROBE_PROBLEMS)
            probe = chained[np.argsort(few[live][chained], kind="stable")[:PROBE_PROBLEMS]]
            for j, part in zip(probe, _placement_parts([problems[j] for j in probe], noise, q, closed_wrong)):
                parts[j] = part
            eq3, placed = _probe_evidence(pairs, rows, live[probe],
                                          _below_prior_of_placement([parts[j] for j in probe], len(noise)))
            if placed.max() < eq3 - PROBE_MARGIN:
                return [pairs]
            kept = np.flatnonzero(placed >= placed.max() - VARIANT_MARGIN)
            noise = noise[kept]
            for j in probe:
                parts[j] = (parts[j][0][kept], *parts[j][1:])
        rest = [j for j, part in enumerate(parts) if part is None]  # the probe's parts are kept
        for j, part in zip(rest, _placement_parts([problems[j] for j in rest], noise, q, closed_wrong)):
            parts[j] = part
        out = np.full((len(noise), pairs["lam"].size), np.nan)
        for i, v in zip(live, _below_prior_of_placement(parts, len(noise))):
            out[:, rows[i]:rows[i + 1]] = v
        return [pairs, *(pairs | {"placement_ll": v} for v in out)]

    # ------------------------------------------------------------------ preparation
    @staticmethod
    def _prepare(g: dict, fit_q: bool = True) -> dict:
        P, M, Mc, Lp, Cpad, cellmask, cand = g["P"], g["M"], g["Mc"], g["Lp"], g["Cpad"], g["cellmask"], g["cand"]
        cntpad = g["stats"]
        cell_cnt = cntpad.reshape(P * Mc, 3).T.copy()  # (3, P * Mc): n1, n0, nidk per flat cell

        # cells are sorted by C and padded at the end: the cells below lambda are a prefix
        n_cells = cellmask.sum(axis=1)
        n_partial = (cellmask & (Cpad < Lp[:, None])).sum(axis=1)
        n_below = (cellmask[:, None, :] & (Cpad[:, None, :] < cand[:, :, None])).sum(axis=2)  # (P, M)
        # the terms below lambda: cell c < n_below of (problem, lambda) in row c
        b_order, b_rank, b_ends = _jagged_layout(n_below.reshape(-1))
        b_cell = _by_entry(b_order // M * Mc, b_ends, plus_row=True)
        b_p = b_order[: b_ends[0] if b_ends.size else 0] // M  # problems of the ranks with cells below
        # with q fitted, the closed-book cell C = 0 holds no unit, so none of the evidence: under
        # lambda >= 1 the oracle cannot answer it right (Assumption 1), and P_nonpar keeps only its
        # answers 0 and IDK. Its right answers leave the terms below lambda (``below_cnt``) and are
        # the noise's in each lambda >= 1 pair (``c0_cnt``, ``c0_pair``).
        closed = (cellmask & (Cpad == 0)) if fit_q else np.zeros_like(cellmask)
        below_cnt = cell_cnt.copy()
        below_cnt[0] *= ~closed.reshape(-1)

        # valid pairs v = (p, lambda, k) in (p, lambda, k) order. When every cell at or above
        # lambda has C = L or lambda = 0, pi = 1 there for every k: all k tie exactly and only
        # the first can win, so only it is scored.
        valid_idx = np.flatnonzero(g["valid"])
        vp, vlk = np.divmod(valid_idx, M * M)
        vl = vlk // M
        vpl = vp * M + vl
        tied = ((cand == 0) | (n_below >= n_partial[:, None])).reshape(-1)[vpl]
        keep = ~tied | np.r_[True, vpl[1:] != vpl[:-1]]
        valid_idx, vp, vl, vpl = valid_idx[keep], vp[keep], vl[keep], vpl[keep]
        V = vp.size
        lam_v, k_v = cand.reshape(-1)[vpl], cand.reshape(-1)[vp * M + valid_idx % M]

        # a pair's cells at or above lambda, by C: the partial ones (C < L; none when lambda = 0)
        # need pi (Appendix A.1), the one with C = L (if observed) has pi = 1 and comes last
        nb_v = n_below.reshape(-1)[vpl]
        n_part = np.where(lam_v > 0, np.maximum(n_partial[vp] - nb_v, 0), 0)
        start_part = np.cumsum(n_part) - n_part
        first_cell = vp * Mc + nb_v  # flat index of a pair's first cell at or above lambda
        e_cell = np.repeat(first_cell - start_part, n_part) + np.arange(n_part.sum())
        grp = np.flatnonzero(n_part)
        pi = cover_prob_partial(lam_v[grp], k_v[grp], Lp[vp[grp]], Cpad.reshape(-1)[e_cell], n_part[grp])
        # the partial cells up to the pair's last one whose term depends on pi < 1 (pi < 1 and
        # outcome 1 or IDK observed) take the general term ("gen"); the cells after it the term
        # of pi = 1, as do the partial cells of lambda = 0 (the pair's "tail")
        # a cell's term depends on pi < 1 through outcomes 1 and IDK, and through outcome 0 when
        # the oracle may answer wrongly without its evidence (q(0) fitted)
        n_x = cell_cnt[0] + cell_cnt[2] + (cell_cnt[1] if fit_q else 0.0)
        dep = (pi < 1.0) & (n_x.take(e_cell) > 0)
        n_gen = np.zeros(V, dtype=np.int64)
        if grp.size:
            last_dep = np.maximum.reduceat(np.where(dep, np.arange(dep.size), -1), start_part[grp])
            n_gen[grp] = np.where(last_dep >= 0, last_dep - start_part[grp] + 1, 0)
        g_order, g_rank, g_ends = _jagged_layout(n_gen)
        g_cell = _by_entry(first_cell[g_order], g_ends, plus_row=True)
        g_pi = pi.take(_by_entry(start_part[g_order], g_ends, plus_row=True))
        gen_n0 = np.zeros(V)  # per pair: n_0 over its general cells, in C order (Eq. 3: P(0|O) = 0)
        if not fit_q:
            _add_rows(gen_n0, cell_cnt[1].take(g_cell), g_ends)
            gen_n0 = gen_n0.take(g_rank)
        lam0 = lam_v == 0
        t_order, t_rank, t_ends = _jagged_layout(np.where(lam0, n_partial[vp], n_part - n_gen))
        t_first = np.where(lam0, vp * Mc, first_cell + n_gen)[t_order]
        # pairs per problem, padded with index V (an appended -inf score)
        pos, n_pairs = segment_positions(vp, P)
        pair_pad = np.full((P, n_pairs.max()), V)
        pair_pad[vp, pos] = np.arange(V)
        return dict(
            problems=g["problems"], P=P, M=M, Mc=Mc, maxC=g["maxC"], cellmask=cellmask, cand=cand,
            totals=cntpad.sum(axis=(1, 2)), n_below=n_below, has_n0=cntpad[:, :, 1].sum(axis=1) > 0,
            cell_cnt=cell_cnt,
            # below lambda, (problem, lambda) ranked by n_below: rows of cell counts
            b_rank=b_rank, b_order=b_order, b_p=b_p, b_ends=b_ends, b_cnt=[c.take(b_cell) for c in below_cnt],
            below_cnt=below_cnt, closed=closed, c0_cnt=(cell_cnt[0] * closed.reshape(-1)).reshape(P, Mc).sum(axis=1),
            c0_pair=closed.any(axis=1)[vp] & (lam_v >= 1),
            # kept pairs in (p, lambda, k) order, their partial cells at or above lambda, pi (flat)
            l_v=vl, k_v=valid_idx % M, pair_pad=pair_pad, pair_reps=n_pairs, nb_v=nb_v, n_part=n_part,
            start_part=start_part, pi=pi, has_full=n_cells > n_partial, last_cell=np.arange(P) * Mc + n_cells - 1,
            gen_n0=gen_n0, fit_q=fit_q,
            # general terms, pairs ranked by their number (g_init: the below sum, g_p: the problem)
            g_init=b_rank[vpl[g_order]], g_p=vp[g_order], g_pi=g_pi,
            g_n1=cell_cnt[0].take(g_cell), g_n0=cell_cnt[1].take(g_cell), g_nidk=cell_cnt[2].take(g_cell),
            g_ends=g_ends,
            # pi = 1 terms, pairs ranked by their number (t_init: from the general ranks)
            t_init=g_rank[t_order], t_cell=_by_entry(t_first, t_ends, plus_row=True), t_ends=t_ends, t_rank=t_rank,
        )

    @staticmethod
    def _objective(d: dict, noise: np.ndarray, nonpar: np.ndarray, prior_N, prior_O, not_covered) -> np.ndarray:
        """sum_j log[P_ij(x_ij|O; lambda, k) P_i(O) + P(x_ij|N) P_i(N)] for every kept pair (V,),
        with P(0|O) = (1 - pi) q(0), P(IDK|O) = (1 - pi) q(IDK) at C >= lambda (``not_covered`` =
        q; Eq. 3 is q = (0, 1)), and with q fitted P(1|O) = 0 at C = 0 for lambda >= 1.

        A pair's per-cell terms are added one at a time in C order, as a per-observation loop
        would (so exact ties stay exact), row by row of jagged layouts (:func:`_jagged_layout`):
        the sum below lambda per (problem, lambda), then per pair its general terms, then its
        pi = 1 terms; then the last (C = L) term plus, with Eq. 3's q(0) = 0, the pair's outcome-0
        part of its general cells (n_0 log P(0|N) P_i(N), the same for every pi)."""
        a_noise = noise[None, :] * prior_N[:, None]  # (P, 3)
        q0, qi = not_covered
        with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = -inf; 0 * log 0 is masked
            # C < lambda: P_nonpar (columns: (problem, lambda) by rank), shared by the cells below
            # lambda; row c of the layout holds cell c of the first ranks (problems b_p)
            bp = d["b_p"]
            log_below = nonpar[:, : bp.size] * prior_O.take(bp)
            log_below += a_noise.T.take(bp, axis=1)
            np.log(log_below, out=log_below)
            below = np.zeros(nonpar.shape[1])
            b1, b0, bi = d["b_cnt"]
            for lo, hi, _ in _row_spans(d["b_ends"]):
                below[: hi - lo] += _cell_term(b1[lo:hi], b0[lo:hi], bi[lo:hi], *log_below[:, : hi - lo])
            acc = below.take(d["g_init"])  # per pair, ranked by its number of general entries
            # C >= lambda: Eq. 3 with the not-covered outcome q; a problem without outcome 0
            # never needs log P(0|N)
            log_a0 = np.where(d["has_n0"], np.log(a_noise[:, 1]), 0.0)
            log_p = np.repeat([np.log(prior_O + a_noise[:, 0]), log_a0, np.log(a_noise[:, 2])], d["Mc"], axis=1)
            log_one = _cell_term(*d["cell_cnt"], *log_p)  # pi = 1, per flat cell

            # general entries: n_1 log(pi P_i(O) + P(1|N) P_i(N)) + n_IDK log((1 - pi) q(IDK) P_i(O)
            # + P(IDK|N) P_i(N)) [+ n_0 log((1 - pi) q(0) P_i(O) + P(0|N) P_i(N)) when q is fitted]
            p, ends = d["g_p"], d["g_ends"]
            n1, n0, ni, pi = d["g_n1"], d["g_n0"], d["g_nidk"], d["g_pi"]
            fit_q = d["fit_q"]
            by_rank = [prior_O.take(p), a_noise[:, 0].take(p), (qi * prior_O).take(p), a_noise[:, 2].take(p)]
            if fit_q:
                by_rank += [(q0 * prior_O).take(p), a_noise[:, 1].take(p)]
            c1, b1, ci, bi = by_rank[:4]
            width = min(int(ends[0]) if ends.size else 0, _CHUNK)  # row 0 is the longest
            x, y, z = np.empty(width), np.empty(width), np.empty(width)
            for lo, hi, r in _row_spans(ends, _CHUNK):  # in pieces that stay in cache
                n, rr = hi - lo, slice(r, r + hi - lo)  # entries lo .. hi - 1 belong to ranks r .. r + n - 1
                t = np.multiply(pi[lo:hi], c1[rr], out=x[:n])
                t += b1[rr]
                np.log(t, out=t)
                t *= n1[lo:hi]
                om = np.subtract(1.0, pi[lo:hi], out=y[:n])
                u = np.multiply(om, ci[rr], out=z[:n])
                u += bi[rr]
                np.log(u, out=u)
                u *= ni[lo:hi]
                t += u
                if fit_q:
                    u = np.multiply(om, by_rank[4][rr], out=z[:n])
                    u += by_rank[5][rr]
                    np.log(u, out=u)
                    u *= n0[lo:hi]
                    t += u
                acc[rr] += t
            if np.isnan(acc).any():  # a nan term (0 * log 0) makes its sum nan: the masked expression
                acc = below.take(d["g_init"])
                om = 1.0 - pi
                terms = [(n1, pi, c1, b1), (ni, om, ci, bi)] + ([(n0, om, *by_rank[4:])] if fit_q else [])
                _add_rows(acc, sum(np.where(cnt > 0, cnt * np.log(w * _by_entry(c, ends) + _by_entry(b, ends)), 0.0)
                                   for cnt, w, c, b in terms), ends)
            acc = acc.take(d["t_init"])  # per pair, ranked by its number of pi = 1 terms
            _add_rows(acc, log_one.take(d["t_cell"]), d["t_ends"])
            # per pair: the C = L term, the last of the sum, plus Eq. 3's outcome-0 part of its
            # general cells (0 when q(0) is fitted: those terms are general entries)
            reps = d["pair_reps"]
            gen_n0 = d["gen_n0"]
            last = np.where(gen_n0 > 0, gen_n0 * np.repeat(log_a0, reps), 0.0)
            last += np.repeat(np.where(d["has_full"], log_one[d["last_cell"]], 0.0), reps)
            if d["c0_pair"].any():  # right at C = 0 under lambda >= 1: n_1 log(P(1|N) P_i(N))
                c0 = d["c0_cnt"]
                term = np.where(c0 > 0, c0 * np.log(a_noise[:, 0]), 0.0)
                last += np.where(d["c0_pair"], np.repeat(term, reps), 0.0)
        ll = acc.take(d["t_rank"])
        ll += last
        return ll

    # ------------------------------------------------------------------ EM
    def _em(self, stats: CellStats, grid: dict) -> None:
        fit_q = self.not_covered == "fitted"
        d = self._prepare(grid, fit_q)
        P, Mc = d["P"], d["Mc"]
        cnt, cellmask, pad = d["cell_cnt"].reshape(3, P, Mc), d["cellmask"], d["pair_pad"]
        ar = np.arange(P)
        cells = np.arange(Mc)
        below_idx = (ar[:, None] * (Mc + 1) + d["n_below"]).reshape(-1)[d["b_order"]]  # prefix ends by rank

        vp = np.repeat(ar, d["pair_reps"])
        open_cells = ~d["closed"]  # where P_nonpar may answer right (all but C = 0 when q is fitted)
        # only the posterior's runs (_marginal_argmax) need the terms below lambda: their pairs_ feed it
        below = self._below_setup(d, cnt, vp) if self._marginal_argmax else None
        if self._marginal_argmax:  # per pair: log prior; DirMult(counts below lambda; a), a from the last step
            log_prior = log_pair_prior(vp, d["cand"][vp, d["l_v"]], P)
            alpha = None  # the task's Dirichlet below lambda (module uncertainty), refitted every step
            dm = log_dirichlet_multinomial(below["n"], alpha)[below["group"]]
            chosen = None  # the pairs it was fitted to (the same pairs: the same a)

        cum = np.zeros((3, P, Mc + 1))
        pi_one = np.append(d["pi"], 1.0)
        # q = (q(0), q(IDK)): what the oracle answers on a span without its evidence. Eq. 3: (0, 1).
        # Fitted: started at the task's share of 0 and IDK among its answers other than 1 on
        # partial spans (0 < C < L), in the interior unless one outcome never occurs (from Eq. 3's
        # (0, 1) the EM never leaves it, and it cannot learn q while every lambda* lies above max C)
        not_covered = (self._not_covered_start(cnt, grid["Cpad"], grid["Lp"], cellmask) if fit_q
                       else np.array([0.0, 1.0]))
        above_star = None
        qN = np.full(cnt.shape, self._em_start)
        prior_N = np.full(P, self._em_start)
        prior_O = np.full(P, 1.0 - self._em_start)
        for step in range(self._steps()):
            # (a) M-step: noise distribution P(x|N), shared by the task
            wN = cnt * qN  # (3, P, Mc), outcome-major
            noise = wN.sum(axis=(1, 2))
            den = noise.sum()
            noise = noise / den if den > 0 else np.full(3, 1.0 / 3.0)

            # (b) P_nonpar,i(x|O; lambda) by cumulative sums over cells sorted by C
            wO = cnt * (1.0 - qN)
            if fit_q and above_star is not None:  # M-step of q: the oracle's answers 0 and IDK at C >= lambda*
                miss = (wO[1:] * above_star).sum(axis=(1, 2))
                if miss.sum() > 0:
                    not_covered = miss / miss.sum()
            w_open = wO.copy()
            w_open[0] *= open_cells
            for c in range(Mc):  # cum[..., c + 1] = wO[..., 0] + ... + wO[..., c], in order
                np.add(cum[:, :, c], w_open[:, :, c], out=cum[:, :, c + 1])
            num = cum.reshape(3, -1).take(below_idx, axis=1)  # (3, P * M), by rank
            nden = num[0] + num[1] + num[2]
            nonpar = num / np.where(nden > 0, nden, 1.0)  # 0 / 0 -> 0

            # argmax per problem over its pairs in (lambda, k) order: the first pair within
            # LL_TIE_RTOL of the maximum wins (all -inf: the first valid pair)
            ll = np.append(self._objective(d, noise, nonpar, prior_N, prior_O, not_covered), -np.inf)
            scored_with = prior_N, prior_O
            score = ll
            if self._marginal_argmax:  # prior x the marginal m of module uncertainty
                part, profile = self._below_parts(below, noise, nonpar, prior_N, prior_O, per_group=True)
                m = marginal_from_parts(ll[:-1], part.take(below["group"]), dm, profile.take(below["group"]))
                score = np.append(m + log_prior, -np.inf)
            v_star = pad[ar, first_near_max(score.take(pad), pad < ll.size - 1)]
            if self._marginal_argmax and not np.array_equal(v_star, chosen):
                chosen = v_star
                alpha = dirichlet_mle(below["n"][below["group"][v_star]], alpha)
                dm = log_dirichlet_multinomial(below["n"], alpha)[below["group"]]
            loglik = ll[v_star]
            l_star = d["l_v"][v_star]

            # P_ij(x_ij|O; lambda*, k*) per cell and outcome (Eq. 4)
            nb_star = d["nb_v"][v_star]
            above_star = cellmask & (cells[None, :] >= nb_star[:, None])
            e_star = d["start_part"][v_star][:, None] + cells[None, :] - nb_star[:, None]
            part_star = above_star & (e_star < (d["start_part"] + d["n_part"])[v_star][:, None])
            pi_star = pi_one.take(np.where(part_star, e_star, pi_one.size - 1))  # (P, Mc), 1 outside
            par = np.stack([pi_star, (1.0 - pi_star) * not_covered[0], (1.0 - pi_star) * not_covered[1]])
            below_star = nonpar.take(d["b_rank"][ar * d["M"] + l_star], axis=1)  # (3, P)
            p_oracle = np.where(above_star, par, below_star[:, :, None])  # (3, P, Mc)
            p_oracle[0] *= ~(d["closed"] & (d["cand"][ar, l_star] >= 1)[:, None])  # never right at C = 0

            # (c) M-step: priors P_i(z) = mean responsibility over the problem's observations
            prior_N = wN.sum(axis=(0, 2)) / d["totals"]
            prior_O = wO.sum(axis=(0, 2)) / d["totals"]

            # (d) E-step
            a = noise[:, None, None] * prior_N[None, :, None]
            den = p_oracle * prior_O[None, :, None]
            den += a
            qN = np.empty(cnt.shape)
            qN[:] = prior_N[None, :, None]
            np.divide(a, den, out=qN, where=den > 0)
            if self._step_done(step, loglik):
                break

        self._set_fit(grid, d["cand"][ar, l_star], d["cand"][ar, d["k_v"][v_star]], loglik, prior_O, noise)
        self.not_covered_ = not_covered
        self._set_pairs(vp, d["cand"][vp, d["l_v"]], d["cand"][vp, d["k_v"]], ll[:-1],
                        **(self._below_parts(below, noise, nonpar, *scored_with) | {"below_prior": alpha}
                           if below is not None else {}))

    @staticmethod
    def _not_covered_start(cnt: np.ndarray, Cpad: np.ndarray, Lp: np.ndarray, cellmask: np.ndarray) -> np.ndarray:
        """The fitted q's start: shares of outcomes 0 and IDK on the partial spans (1/2 each without any)."""
        partial = cellmask & (Cpad > 0) & (Cpad < Lp[:, None])
        miss = (cnt[1:] * partial).sum(axis=(1, 2))
        return miss / miss.sum() if miss.sum() > 0 else np.array([0.5, 0.5])

    @staticmethod
    def _below_setup(d: dict, cnt: np.ndarray, vp: np.ndarray) -> dict:
        """What the marginal below lambda needs, once per fit, per distinct (problem, lambda) of the
        kept pairs (``group``: each pair's; pairs are sorted by problem, lambda): the counts n_x of
        outcomes 1, 0, IDK below lambda ``n`` (G, 3; of ``below_cnt``, the counts P_nonpar takes),
        the rank of the P_nonpar column, and at lambda = 0 the problem's counts (``tot``)."""
        P, Mc, M = d["P"], d["Mc"], d["M"]
        pl_v = vp * M + d["l_v"]
        first = np.flatnonzero(np.r_[True, pl_v[1:] != pl_v[:-1]])
        group = np.cumsum(np.r_[True, pl_v[1:] != pl_v[:-1]]) - 1
        pl_g, p_g = pl_v[first], vp[first]
        cum = np.concatenate([np.zeros((3, P, 1)), np.cumsum(d["below_cnt"].reshape(3, P, Mc), axis=2)], axis=2)
        n = cum.reshape(3, -1)[:, p_g * (Mc + 1) + d["n_below"].reshape(-1)[pl_g]].T  # (G, 3)
        lam0 = d["cand"].reshape(-1)[pl_g] == 0
        return dict(group=group, p=p_g, n=n, rank=d["b_rank"][pl_g], lam0=lam0, tot=cnt.sum(axis=2).T[p_g[lam0]])

    @staticmethod
    def _below_parts(b: dict, noise, nonpar, prior_N, prior_O, per_group: bool = False):
        """Per kept pair, of the step that scored the pairs: ``below_ll``, the plug-in part of the
        objective below lambda, sum_x n_x log[P_nonpar,i(x|O; lambda) P_i(O) + P(x|N) P_i(N)]
        (0 log 0 = 0); ``below_n``, the counts n_x (V, 3); ``profile_ll``, at lambda = 0 the
        objective at its best P_i(O) (NaN at other lambdas). ``per_group``: (below_ll, profile_ll)
        per distinct (problem, lambda) instead."""
        p, n, g = b["p"], b["n"], b["group"]
        q = nonpar[:, b["rank"]].T * prior_O[p, None] + noise[None, :] * prior_N[p, None]
        # lambda = 0 (pi = 1 at every C): l(P_i(O)) = sum_x n_x log(P_i(O) 1[x = 1] + P_i(N) P(x|N)) is
        # largest at P_i(O) = (n_1 / n - P(1|N)) / (1 - P(1|N)), clipped to [0, 1]
        tot = b["tot"]
        with np.errstate(divide="ignore", invalid="ignore"):
            part = np.where(n > 0, n * np.log(q), 0.0).sum(axis=1)
            pO = np.clip((tot[:, 0] / tot.sum(axis=1) - noise[0]) / (1.0 - noise[0]), 0.0, 1.0)
            pO = np.where(noise[0] < 1.0, pO, 1.0)  # P(1|N) = 1: every P_i(O) fits alike
            q0 = np.stack([pO + (1.0 - pO) * noise[0], (1.0 - pO) * noise[1], (1.0 - pO) * noise[2]], axis=1)
            profile = np.full(p.size, np.nan)
            profile[b["lam0"]] = np.where(tot > 0, tot * np.log(q0), 0.0).sum(axis=1)
        if per_group:
            return part, profile
        return dict(below_ll=part[g], below_n=n[g], profile_ll=profile[g])


def _placement_parts(problems: list, noise: np.ndarray, q: np.ndarray, closed_wrong: bool = False) -> list:
    """The parts of placement_ll (:meth:`COWFit.posterior_pairs`; :func:`_below_prior_of_placement`
    makes them the (V, pairs) arrays) per problem (L, max C, its spans' C, start and outcome codes
    x (0: 1, 1: 0, 2: IDK), its pairs' lambda and k, whether the forward pass is affordable): the
    marginal above lambda, one row per variant of ``noise`` (V, span classes, 3: each span takes
    its class's P(x|N), :func:`span_class`), P_i(O) integrated
    out on Gauss-Legendre nodes (uniform prior); the counts below lambda; the pairs' lambdas.
    Each problem's parts are its own. Without the forward pass, the chain
    :func:`~raylc.dolce.placement.few_copies_loglik` up to :data:`~raylc.dolce.placement.FEW_COPIES`
    copies; pairs with more are left out (-inf).
    ``closed_wrong`` (q fitted): under lambda >= 1 a right answer at C = 0 is the noise's
    (P(1|N) (1 - P_i(O))), not one of the terms below lambda."""
    V = noise.shape[0]
    nodes, weights = np.polynomial.legendre.leggauss(GRID)
    pO, lw = np.tile((nodes + 1.0) / 2.0, V), np.tile(np.log(weights / 2.0), V)  # (V G,), variant-major
    items, owners, logs = [], [], []
    few: dict = {}
    for i, (L, max_c, C, start, x, lam, k, exact) in enumerate(problems):
        lams = np.unique(lam[(lam >= 1) & (lam <= max_c)])
        k_max = {int(a): int(k[lam == a].max()) for a in lams}
        nx = np.repeat(noise[:, span_class(C), x], GRID, axis=0).T  # (spans, V G): P(x_j|N) of the span's class
        with np.errstate(divide="ignore"):
            lg1 = np.maximum(np.log(pO * (x == 0)[:, None] + (1.0 - pO) * nx), -1e5)  # covered
            lg0 = np.maximum(np.log(pO * q[x][:, None] + (1.0 - pO) * nx), -1e5)  # not covered
        logs.append((lg1, lg0, nx))
        for a in k_max:
            if exact:
                items.append((L, a, k_max[a], start, C, lg1, lg0))
                owners.append((i, a))
            else:
                few[(i, a)] = few_copies_loglik(L, a, min(k_max[a], FEW_COPIES), start, C, lg1, lg0)
    by_lam = dict(zip(owners, placement_logliks(items)))
    out = []
    for i, (L, _, C, _, x, lam, k, _) in enumerate(problems):
        lg1, lg0, nx = logs[i]
        above = np.empty((lam.size, pO.size))
        below = np.empty((lam.size, 3))
        missed = (C == 0) & (x == 0) & closed_wrong  # right closed-book answers
        with np.errstate(divide="ignore"):
            lgc = np.maximum(np.log((1.0 - pO) * nx[missed]), -1e5).sum(axis=0)
        for r, (a, b) in enumerate(zip(lam.tolist(), k.tolist())):
            if (i, a) in by_lam:
                above[r] = by_lam[(i, a)][:, b - 1]
            elif (i, a) in few:  # more copies than the chain places: left out
                above[r] = few[(i, a)][:, b - 1] if b <= FEW_COPIES else -np.inf
            else:  # lambda = 0 covers every span; beyond max C only the whole context does
                above[r] = lg1[C >= (0 if a == 0 else L)].sum(axis=0)
            if a >= 1:
                above[r] += lgc
            below[r] = np.bincount(x[(C < a) & ~missed], minlength=3)
        out.append((log_sum_exp((above + lw).reshape(lam.size, V, GRID), axis=2).T, below, lam))
    return out


#: Rounds of the empirical-Bayes fit of the Dirichlet below lambda under evidence that stays put.
BELOW_ROUNDS = 10


def _below_prior_of_placement(parts: list, V: int) -> list[np.ndarray]:
    """Each problem's (V, pairs) placement_ll from its parts (the marginal above lambda per noise
    variant, the counts below lambda and the lambdas of its pairs): plus the Dirichlet-multinomial
    of the counts below lambda under each variant's own Dirichlet, fitted (empirical Bayes,
    :func:`~raylc.dolce.uncertainty.dirichlet_mle`) to the counts below the pair each problem's
    posterior favours (prior x marginal), in :data:`BELOW_ROUNDS` rounds from the symmetric start.
    The EM's Dirichlet was fitted where Eq. 3 chose the pairs; under Eq. 3 a document's right
    answers on one paragraph are as well explained below a longer lambda, and a Dirichlet fitted
    there makes them cheap."""
    above = [p[0] for p in parts]
    below = np.concatenate([p[1] for p in parts])
    lam = np.concatenate([p[2] for p in parts])
    owner = np.concatenate([np.full(p[2].size, j) for j, p in enumerate(parts)])
    prior = log_pair_prior(owner, lam, len(parts))
    bounds = np.cumsum([0] + [a.shape[1] for a in above])
    marg = np.empty((V, bounds[-1]))
    for v in range(V):
        ab = np.concatenate([a[v] for a in above])
        alpha = None
        for _ in range(BELOW_ROUNDS):
            score = ab + log_dirichlet_multinomial(below, alpha) + prior
            best = np.array([lo + int(np.argmax(score[lo:hi])) for lo, hi in zip(bounds[:-1], bounds[1:])])
            fitted = dirichlet_mle(below[best], alpha)
            if fitted is None or (alpha is not None and np.allclose(fitted, alpha, rtol=1e-6)):
                break
            alpha = fitted
        marg[v] = ab + log_dirichlet_multinomial(below, alpha)
    return [marg[:, lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


def _probe_evidence(pairs: dict, rows: np.ndarray, members: np.ndarray, placed: list) -> tuple[float, np.ndarray]:
    """The evidence of ``members`` (problem indices; ``rows`` bounds each problem's pairs) under
    Eq. 3's pairs, and under each placement variant (``placed``, a (V, pairs) array per member;
    (V,)), the pairs weighed by the posterior's prior."""
    prior = log_pair_prior(pairs["problem"], pairs["lam"], int(pairs["problem"].max(initial=0)) + 1)
    eq3 = marginal_loglik(pairs) + prior
    own = sum(float(log_sum_exp(eq3[rows[i]:rows[i + 1]], axis=0)) for i in members)
    return own, sum(log_sum_exp(v + prior[rows[i]:rows[i + 1]], axis=1) for i, v in zip(members, placed))


def _placement_cost(pairs: dict, L: np.ndarray, max_c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per problem, the work of its forward passes (:func:`~raylc.dolce.placement.placement_work`
    summed over its lambdas 1 .. max C, each with the largest k it scores) and of its chains over
    the copies (:func:`~raylc.dolce.placement.few_copies_work`, as many lengths as lambdas) on
    the grid of P_i(O) x :data:`BUDGET_VARIANTS` noise variants, for
    :data:`~raylc.dolce.placement.BUDGET` and :data:`~raylc.dolce.placement.FEW_BUDGET` (whatever
    the number of variants :func:`noise_variants` gives, so the same problems take the placement
    law)."""
    p, lam, k = pairs["problem"], pairs["lam"], pairs["k"]
    use = (lam >= 1) & (lam <= max_c[p])
    key = p[use] * (int(lam.max(initial=0)) + 1) + lam[use]
    keys, inv = np.unique(key, return_inverse=True)
    k_max = np.zeros(keys.size, dtype=np.int64)
    np.maximum.at(k_max, inv.reshape(-1), k[use])
    kp, kl = np.divmod(keys, int(lam.max(initial=0)) + 1)
    work = placement_work(L[kp], kl, k_max, max_c[kp], GRID * BUDGET_VARIANTS)
    n_lams = np.bincount(kp, minlength=L.size)
    few = few_copies_work(L[kp], kl, k_max, n_lams[kp], GRID * BUDGET_VARIANTS)
    return (np.bincount(kp, weights=work.astype(np.float64), minlength=L.size),
            np.bincount(kp, weights=few.astype(np.float64), minlength=L.size))


def fit_cow_task(obs: pl.DataFrame, n_steps: int = 10, threshold: float = 0.5) -> tuple[pl.DataFrame, dict]:
    """``COWFit(n_steps, threshold).fit(obs).frames()``: the COW model (Algorithm 1) of one
    task's observation table as (problems, info) (:meth:`raylc.dolce.cells.CellFit.frames`;
    scenario "COW"; categories with lambda_p = k_p of the task's partial lengths)."""
    return COWFit(n_steps=n_steps, threshold=threshold).fit(obs).frames()
