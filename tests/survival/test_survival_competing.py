"""Competing risks across a composite's components (trashfire.survival.competing): each
component's cumulative incidence (Aalen-Johansen) at the budget is its share of the samples, the
incidences sum to the composite's failure share, the components come in the composite's order,
and the validity flag `black_box_carries` trips where Square out-breaks the white-box
components before it."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from tests.attacks.test_standard import N_IMAGES, custom_spec, ours
from tests.conftest import PixelModel
from trashfire.attacks import standard
from trashfire.metrics import validity
from trashfire.survival import competing
from trashfire.survival.competing import COMPETING_COLUMNS, competing_table, incidence_curves
from trashfire.survival.figures import competing_risks_figure

LABELS = ["model_hash", "attack_family", "defence", "dataset"]


def composite_cell(name: str, durations, causes, censored_at: float) -> pd.DataFrame:
    """One composite cell: failures at `durations` by `causes`, then samples standing at the budget."""
    broken = pd.DataFrame({"duration": durations, "event": 1, "broken_by": causes})
    standing = pd.DataFrame({"duration": [censored_at] * 4, "event": 0, "broken_by": ""})
    return pd.concat([broken, standing], ignore_index=True).assign(
        attack_hash=name, model_hash="m", attack_family="autoattack linf", defence="none", dataset="digits", weight=1
    )


def hand_made() -> pd.DataFrame:
    composite = composite_cell("aa", [0.5, 1.0, 1.0, 2.0, 2.0, 6.0], ["first_query", "apgd_ce", "apgd_ce", "apgd_ce", "square", "square"], 10.0)
    plain = composite_cell("pgd", [1.0, 2.0], ["", ""], 10.0).assign(attack_family="pgd linf")  # not a composite: no causes
    return pd.concat([composite, plain], ignore_index=True)


def test_each_components_incidence_is_its_share_and_they_sum_to_the_failure_share():
    table = competing_table(hand_made(), "attack_hash", LABELS)
    assert set(table["attack_hash"]) == {"aa"}  # the plain attack's cell has no causes
    assert list(table["component"]) == ["first_query", "apgd_ce", "square"]  # by earliest failure
    assert list(table["broken"]) == [1, 3, 2]
    assert table["incidence"].to_numpy() == pytest.approx([0.1, 0.3, 0.2], abs=1e-12)  # censored only at the budget: counts / 10
    assert table["failure_share"].iloc[0] == pytest.approx(0.6)
    assert table["incidence"].sum() == pytest.approx(table["failure_share"].iloc[0], abs=1e-12)
    assert table["share_of_failures"].to_numpy() == pytest.approx([1 / 6, 3 / 6, 2 / 6])
    assert (table["incidence_low"] <= table["incidence"]).all() and (table["incidence"] <= table["incidence_high"]).all()


def test_censoring_before_the_budget_weighs_later_failures_up():
    """A sample censored early leaves fewer at risk: the Aalen-Johansen incidences, not counts / n."""
    data = composite_cell("aa", [1.0, 3.0], ["apgd_ce", "square"], 10.0)
    data.loc[len(data) - 1, "duration"] = 2.0  # one standing sample leaves the risk set at 2
    table = competing_table(data, "attack_hash", LABELS).set_index("component")
    # S(1-) = 1, 6 at risk: F_ce = 1/6; S(3-) = 5/6, 4 at risk at 3: F_sq = 5/6 x 1/4
    assert table.loc["apgd_ce", "incidence"] == pytest.approx(1 / 6)
    assert table.loc["square", "incidence"] == pytest.approx(5 / 24)
    assert table["incidence"].sum() == pytest.approx(table["failure_share"].iloc[0])


def test_a_real_composites_causes_sum_to_its_failure_share(digits_cnn):
    """AutoAttack (reduced budgets) on the torch engine: the table's counts are the engine's
    `broken_by`, and the incidences sum to the failure share."""
    split, target = digits_cnn
    x, y = split.x_attack.numpy()[:N_IMAGES], split.y_attack.numpy()[:N_IMAGES]
    cells = []
    for eps_pixels in (0.1,):  # APGD-CE, APGD-T and Square each break samples there
        log, clock = ours(target, x, y, custom_spec(), PixelModel(target).eps_standardised(eps_pixels))
        cells.append(
            pd.DataFrame({"duration": clock.queries.astype(float), "event": log.event.astype(int), "broken_by": log.broken_by, "weight": 1}).assign(
                attack_hash=f"eps{eps_pixels}", model_hash="m", attack_family="autoattack linf", defence="none", dataset="digits"
            )
        )
        counts = pd.Series(log.broken_by[log.event]).value_counts()
        table = competing_table(cells[-1], "attack_hash", LABELS).set_index("component")
        assert table["broken"].to_dict() == counts.to_dict()
        assert table["incidence"].sum() == pytest.approx(log.event.mean(), abs=1e-9)
        assert table["failure_share"].iloc[0] == pytest.approx(log.event.mean(), abs=1e-9)
        assert list(table.index) == [c for c in (standard.FIRST_QUERY, *custom_spec()["kwargs"]["components"]) if c in counts]  # the composite's order
    curves = incidence_curves(pd.concat(cells, ignore_index=True), ["attack_family", "defence"])
    figure = competing_risks_figure(curves, "queries")
    assert len([ax for ax in figure.axes if ax.get_visible()]) == 1
    assert figure.axes[0].get_ylim()[1] == pytest.approx(1.02)
    assert standard.FIRST_QUERY in curves[("autoattack linf", "none")]


def experiments_rows(black_box_components: str = "square") -> pd.DataFrame:
    return pd.DataFrame({"attack_hash": ["aa"], "attack": ["autoattack"], "attack_value": [0.1], "black_box_components": [black_box_components]})


def competing_rows(square: int, white: list[int]) -> pd.DataFrame:
    names = ["apgd_ce", "apgd_t", "fab_t"][: len(white)]
    rows = (
        [{"component": "first_query", "broken": 1}]
        + [{"component": n, "broken": b} for n, b in zip(names, white)]
        + [{"component": "square", "broken": square}]
    )
    return pd.DataFrame(rows).assign(attack_hash="aa", samples=100, order=lambda t: range(1, len(t) + 1))


def test_black_box_carries_trips_where_square_out_breaks_the_white_box_components_before_it():
    tripped, detail = validity.black_box_carries(experiments_rows(), competing_rows(square=6, white=[3, 2]))
    assert tripped is True and "square broke 6 of 100" in detail and "apgd_ce 3, apgd_t 2" in detail
    assert validity.black_box_carries(experiments_rows(), competing_rows(square=5, white=[3, 2]))[0] is False  # equal: not more
    assert validity.black_box_carries(experiments_rows(), competing_rows(square=1, white=[40]))[0] is False
    # the samples wrong before any component ran are no white-box component's
    assert validity.black_box_carries(experiments_rows(), competing_rows(square=2, white=[1]))[0] is True


def test_black_box_carries_is_unchecked_without_a_composite_or_its_table():
    assert validity.black_box_carries(experiments_rows(""), competing_rows(square=6, white=[1]))[0] is None
    assert validity.black_box_carries(experiments_rows(), None)[0] is None
    assert validity.black_box_carries(experiments_rows(), competing_rows(square=0, white=[5]).query("component != 'square'")) == (
        False,
        "no black-box component broke a sample",
    )


def test_the_experiments_table_names_autoattacks_black_box_components(conf_dir, tmp_path):
    from omegaconf import OmegaConf

    from trashfire.tables.experiments import black_box_components

    standard_version = OmegaConf.load(conf_dir / "attack" / "autoattack.yaml").autoattack
    assert black_box_components(standard_version, tmp_path) == "square"
    rand = OmegaConf.load(conf_dir / "attack" / "autoattack_rand.yaml").autoattack_rand
    assert black_box_components(rand, tmp_path) == ""
    assert black_box_components(OmegaConf.create({"name": "pgd", "kwargs": {}}), tmp_path) == ""


def test_a_components_black_box_key_changes_no_cell_hash(conf_dir):
    from tests.conftest import tiny_config
    from trashfire.core.grid import attack_cells

    def hashes(*extra):
        return sorted(c.hash for c in attack_cells(tiny_config(conf_dir.parent / "unused", "attack=[autoattack]", "attack.autoattack.version=custom", *extra)))

    assert hashes() == hashes("attack.autoattack.kwargs.components.square.black_box=false")
    assert not set(hashes()) & set(hashes("attack.autoattack.kwargs.components.square.max_iter=100"))  # a budget is hashed


def test_black_box_carries_reads_every_black_box_component_and_names_the_worst_cell():
    two_black = competing_rows(square=2, white=[3]).assign(component=["first_query", "apgd_ce", "square"])
    two_black = pd.concat([two_black, pd.DataFrame([{"attack_hash": "aa", "component": "probe", "broken": 5, "samples": 100, "order": 4}])], ignore_index=True)
    tripped, detail = validity.black_box_carries(experiments_rows("square,probe"), two_black)  # the column lists them comma-separated
    assert tripped is True and detail.startswith("probe broke 5 of 100") and detail.endswith("apgd_ce 3")  # square is no white-box component
    cells = pd.concat([experiments_rows(), experiments_rows().assign(attack_hash="bb", attack_value=0.2)], ignore_index=True)
    both = pd.concat([competing_rows(square=4, white=[3]), competing_rows(square=9, white=[3]).assign(attack_hash="bb")], ignore_index=True)
    assert validity.black_box_carries(cells, both)[1].startswith("square broke 9 of 100 samples at autoattack eps 0.2")  # the larger excess
    tie = pd.concat([competing_rows(square=4, white=[3]), competing_rows(square=4, white=[3]).assign(attack_hash="bb")], ignore_index=True)
    assert "eps 0.1" in validity.black_box_carries(cells, tie)[1]  # at a tie, the first cell
    alone = competing_rows(square=2, white=[])  # nothing white-box ran before it
    assert validity.black_box_carries(experiments_rows(), alone) == (
        True,
        "square broke 2 of 100 samples at autoattack eps 0.1; the white-box components before it: none",
    )


def test_black_box_carries_is_unchecked_where_the_table_names_no_black_box_component():
    unchecked = "not checked: no composite cell with a black-box component (AutoAttack standard)"
    read_back = experiments_rows().assign(black_box_components=np.nan)  # an empty CSV field reads as NaN
    assert validity.black_box_carries(read_back, competing_rows(square=6, white=[1])) == (None, unchecked)
    older = experiments_rows().drop(columns="black_box_components")  # a table from before the column
    assert validity.black_box_carries(older, competing_rows(square=6, white=[1])) == (None, unchecked)
    assert validity.black_box_carries(experiments_rows(), None) == (None, "not checked: no competing_risks.csv (rerun the survival stage)")


def at_the_budget() -> pd.DataFrame:
    """Nine samples: failures at 1 (one each of two causes), 2, and two at the budget's last check
    (10), tied with the four samples standing there."""
    return composite_cell("aa", [1.0, 1.0, 2.0, 10.0, 10.0], ["apgd_ce", "square", "apgd_ce", "square", "apgd_ce"], 10.0)


def test_a_failure_at_the_budget_has_every_sample_standing_there_at_risk():
    """Censored at a failure's time means at risk at that failure: the incidences are the counts
    over 9 (no censoring before), and they sum to the failure share."""
    table = competing_table(at_the_budget(), "attack_hash", LABELS)
    assert list(table["component"]) == ["apgd_ce", "square"] and list(table["order"]) == [1, 2]  # both first fail at 1: by name
    assert list(table["samples"]) == [9, 9] and list(table["broken"]) == [3, 2]
    assert table["incidence"].to_numpy() == pytest.approx([3 / 9, 2 / 9], abs=1e-12)
    assert table["failure_share"].to_numpy() == pytest.approx([5 / 9, 5 / 9]) and table["share_of_failures"].to_numpy() == pytest.approx([3 / 5, 2 / 5])
    assert ((table["incidence_low"] < table["incidence"]) & (table["incidence"] < table["incidence_high"])).all()
    square = competing_table(at_the_budget().assign(broken_by=lambda t: t["broken_by"].replace("apgd_ce", "square")), "attack_hash", LABELS)
    assert (
        square["incidence_high"].iloc[0] > competing_table(at_the_budget(), "attack_hash", LABELS)["incidence_high"].iloc[1]
    )  # the band at the budget, not before


def test_a_weighted_row_counts_as_its_samples():
    data = at_the_budget()
    weighted = data.drop_duplicates(subset=["duration", "event", "broken_by"]).copy()
    weighted["weight"] = data.groupby(["duration", "event", "broken_by"])["weight"].transform("sum").loc[weighted.index]
    repeated, merged = competing_table(data, "attack_hash", LABELS), competing_table(weighted, "attack_hash", LABELS)
    assert len(weighted) < len(data)
    for column in ("samples", "broken", "incidence", "failure_share"):
        assert merged[column].to_numpy() == pytest.approx(repeated[column].to_numpy(), abs=1e-12), column


def test_the_table_lists_the_cells_in_order_and_has_its_columns_when_empty():
    data = pd.concat([hand_made().assign(attack_hash=lambda t: t["attack_hash"].replace("aa", "zz")), at_the_budget()], ignore_index=True)
    table = competing_table(data, "attack_hash", LABELS)
    assert list(dict.fromkeys(table["attack_hash"])) == ["aa", "zz"]  # sorted, whatever the rows' order
    empty = competing_table(hand_made().query("attack_hash == 'pgd'"), "attack_hash", LABELS)
    assert empty.empty and list(empty.columns) == ["attack_hash", *LABELS, *COMPETING_COLUMNS]


def test_the_incidence_curves_pool_the_composite_cells_of_a_group_and_repeat_exactly():
    other = at_the_budget().assign(attack_hash="bb", defence="gauss_out")
    data = pd.concat([hand_made(), other], ignore_index=True)
    curves = incidence_curves(data, ["attack_family", "defence"])
    assert list(curves) == [("autoattack linf", "gauss_out"), ("autoattack linf", "none")]  # the plain attack's cell has no causes
    assert list(curves[("autoattack linf", "none")]) == ["first_query", "apgd_ce", "square"]
    ends = {cause: float(curve.iloc[-1]) for cause, curve in curves[("autoattack linf", "gauss_out")].items()}
    assert ends == pytest.approx({"apgd_ce": 3 / 9, "square": 2 / 9})
    assert list(incidence_curves(data, ["defence"])) == [("gauss_out",), ("none",)]  # one grouping column: keys are still tuples
    again = incidence_curves(data, ["attack_family", "defence"])
    for key, by_cause in curves.items():
        for cause, curve in by_cause.items():
            pd.testing.assert_series_equal(curve, again[key][cause])  # the jitter is seeded


def test_the_figure_has_a_panel_per_group_stacked_in_the_composites_order():
    curves = incidence_curves(
        pd.concat([hand_made(), at_the_budget().assign(attack_hash="bb", defence="gauss_out")], ignore_index=True), ["attack_family", "defence"]
    )
    figure = competing_risks_figure(curves, "queries")
    shown = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["autoattack linf / none", "autoattack linf / gauss_out"]  # undefended first
    assert [t.get_text() for t in shown[0].get_legend().get_texts()] == ["first_query", "apgd_ce", "square"]
    assert shown[0].get_xscale() == "log" and shown[0].get_xlabel() == "adversary's work per sample (queries)"
    top = shown[1].collections[-1].get_paths()[0].vertices[:, 1].max()  # the stack's top edge: the failure share
    assert top == pytest.approx(5 / 9)


def test_a_cell_broken_to_the_last_sample_sums_to_one():
    """No sample stands at the budget: the last failure is the last time, and its incidence counts."""
    data = composite_cell("aa", [1.0, 2.0, 3.0, 5.0], ["apgd_ce", "apgd_t", "apgd_ce", "square"], 10.0).query("event == 1")
    table = competing_table(data, "attack_hash", LABELS).set_index("component")
    assert table["incidence"].to_dict() == pytest.approx({"apgd_ce": 0.5, "apgd_t": 0.25, "square": 0.25})
    assert table["failure_share"].iloc[0] == pytest.approx(1.0) and table["incidence"].sum() == pytest.approx(1.0)
    assert table[["incidence_low", "incidence_high"]].isna().all().all()  # nobody at risk after the last failure: lifelines gives no band there


def test_ties_are_broken_within_the_smallest_gap_whatever_the_times_scale():
    """Failures tied across causes are jittered by a tenth of the smallest gap between times, not
    by a fixed amount, so that on durations of 1e-5 (GFLOPs of a small model) no failure passes
    the sample censored between them; a cell whose every sample shares one time needs no gap."""
    for scale in (1.0, 1e-5):
        data = composite_cell("aa", [1.0, 1.0, 3.0], ["apgd_ce", "square", "square"], 10.0)
        data.loc[len(data) - 1, "duration"] = 2.0  # one sample leaves the risk set at 2
        table = competing_table(data.assign(duration=data["duration"] * scale), "attack_hash", LABELS).set_index("component")
        # at 1: 7 at risk, one failure each; at 3: 4 at risk, S = 5/7
        assert table["incidence"].to_dict() == pytest.approx({"apgd_ce": 1 / 7, "square": 1 / 7 + 5 / 28}), scale
    first_only = pd.DataFrame({"duration": 1.0, "event": 1, "broken_by": ["first_query"] * 4, "weight": 1}).assign(
        attack_hash="aa", model_hash="m", attack_family="autoattack linf", defence="none", dataset="digits"
    )
    assert competing_table(first_only, "attack_hash", LABELS)["incidence"].tolist() == pytest.approx([1.0])


def test_a_plain_cell_read_back_from_csv_is_no_composite():
    """An empty cause read back as NaN (from a CSV of the survival data) is no cause either."""
    data = hand_made()
    data.loc[data["attack_hash"] == "pgd", "broken_by"] = np.nan
    data.loc[(data["attack_hash"] == "aa") & (data["event"] == 0), "broken_by"] = np.nan
    assert list(incidence_curves(data, ["attack_family", "defence"])) == [("autoattack linf", "none")]
    assert set(competing_table(data, "attack_hash", LABELS)["attack_hash"]) == {"aa"}


def incidence(times: list[float], values: list[float]) -> pd.Series:
    return pd.Series(values, index=pd.Index(times, dtype=float))


def corners(collection) -> set[tuple[float, float]]:
    return {(float(x), float(y)) for x, y in np.round(collection.get_paths()[0].vertices, 9)}


def test_the_figure_stacks_each_cause_as_a_step_that_holds_until_its_next_failure():
    """apgd_ce reaches 0.2 at t=1 and 0.3 at t=4; square 0.1 at t=2 and 0.25 at t=8: the stack's
    top edge steps 0.2, 0.3, 0.4, 0.55 (each cause held between its own times, 0 before its first)."""
    curves = {("autoattack linf", d): {"apgd_ce": incidence([1.0, 4.0], [0.2, 0.3]), "square": incidence([2.0, 8.0], [0.1, 0.25])} for d in ("none", "a", "b")}
    curves[("autoattack linf", "c")] = {"square": incidence([2.0], [0.5])}  # apgd_ce broke nothing there
    figure = competing_risks_figure(curves)
    assert tuple(figure.get_size_inches()) == pytest.approx((5.2 * 3, 4.0 * 2))  # three panels to a row
    assert [ax.get_visible() for ax in figure.axes] == [True] * 4 + [False] * 2
    assert figure.get_suptitle() == "Which component breaks the samples (Aalen-Johansen, stacked in the composite's order; top edge: the failure share)"
    ax = figure.axes[0]
    assert ax.get_title() == "autoattack linf / none" and ax.title.get_fontsize() == 10
    assert ax.get_ylim() == (0.0, 1.02) and ax.get_ylabel() == "cumulative incidence of failure"
    assert ax.get_xlabel() == "adversary's work per sample (s)"  # the default unit
    legend = ax.get_legend()
    assert legend._loc == 2 and [t.get_fontsize() for t in legend.get_texts()] == [7.0, 7.0]  # upper left
    apgd, square = ax.collections
    assert corners(apgd) == {(1, 0), (2, 0), (4, 0), (8, 0), (1, 0.2), (2, 0.2), (4, 0.2), (4, 0.3), (8, 0.3)}
    assert corners(square) == {(1, 0.2), (2, 0.2), (4, 0.2), (4, 0.3), (8, 0.3), (2, 0.3), (4, 0.4), (8, 0.4), (8, 0.55)}
    assert apgd.get_alpha() == square.get_alpha() == 0.8
    tab10 = [(*plt.get_cmap("tab10")(i)[:3], 0.8) for i in range(2)]
    for ax in figure.axes[1:3]:
        assert [tuple(c.get_facecolor()[0]) for c in ax.collections] == tab10
    assert [tuple(c.get_facecolor()[0]) for c in figure.axes[3].collections] == tab10[1:]  # a cause keeps its colour in every panel
    plt.close(figure)


def test_one_panel_stands_alone_and_the_eleventh_cause_takes_the_first_colour_again():
    curves = {("autoattack linf", "none"): {f"cause{i}": incidence([1.0 + i], [0.05]) for i in range(11)}}
    figure = competing_risks_figure(curves, "queries")
    (ax,) = figure.axes
    assert tuple(figure.get_size_inches()) == pytest.approx((5.2, 4.0))
    colours = [tuple(c.get_facecolor()[0][:3]) for c in ax.collections]
    assert colours[10] == colours[0] == plt.get_cmap("tab10")(0)[:3] and colours[9] == plt.get_cmap("tab10")(9)[:3]
    plt.close(figure)


def test_the_stage_writes_the_table_and_the_figure_in_the_clocks_unit(tmp_path, monkeypatch, caplog):
    data, real_save, drawn = hand_made(), competing.save, []
    caplog.set_level("INFO", logger=competing.log.name)

    def keeping(figure, path):
        ax = figure.axes[0]
        drawn.append((path.name, ax.get_xlabel(), max(c.get_paths()[0].vertices[:, 0].max() for c in ax.collections)))
        real_save(figure, path)

    monkeypatch.setattr(competing, "save", keeping)
    competing.write_competing_risks(data, tmp_path, 1.0, "queries")
    written = pd.read_csv(tmp_path / "competing_risks.csv", keep_default_na=False)
    pd.testing.assert_frame_equal(written, competing_table(data, "attack_hash", competing.COMPETING_LABELS).reset_index(drop=True), check_dtype=False)
    shares = written.set_index("component")["share_of_failures"]
    expected = f"apgd_ce {shares['apgd_ce']:.2f}, first_query {shares['first_query']:.2f}, square {shares['square']:.2f}"
    said = [r.getMessage() for r in caplog.records if r.name == competing.log.name]
    assert said == [f"competing risks in 1 composite cells: median share of the failures by component: {expected}"]
    competing.write_competing_risks(data, tmp_path, 1e9, "FLOPs")  # fitted in GFLOPs, drawn in FLOPs
    assert [d[:2] for d in drawn] == [
        ("competing_risks.png", "adversary's work per sample (queries)"),
        ("competing_risks.png", "adversary's work per sample (FLOPs)"),
    ]
    assert drawn[1][2] == pytest.approx(drawn[0][2] * 1e9) and (tmp_path / "competing_risks.png").stat().st_size > 0
    competing.write_competing_risks(data.assign(broken_by=""), tmp_path, 1.0, "s")
    assert not (tmp_path / "competing_risks.csv").exists() and not (tmp_path / "competing_risks.png").exists()  # no composite, no stale files
