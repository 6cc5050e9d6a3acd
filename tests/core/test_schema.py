"""The one schema: the label block, the typed records and what they lack, the attack-family
label and its identifier, eps units, and every table's columns as the stages write them (on
hand-made records at a tiny grid's hashes, through timing, aggregate and the report)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape

from tests.conftest import ROOT, artefacts_of, tiny_overrides
from trashfire.attacks.campaign import attack_record_path, outcomes_path
from trashfire.attacks.spec import attack_strength
from trashfire.brittle.scores import brittle_hash, brittle_record_path, brittle_settings
from trashfire.brittle.spec import BRITTLE, BrittleRecord, write_current_scores
from trashfire.core import schema
from trashfire.core.config import compose, validate
from trashfire.core.errors import DataError
from trashfire.core.grid import attack_cells, model_cells
from trashfire.core.records import read_table, write_npz
from trashfire.core.schema import AttackRecord, Outcomes, TrainRecord
from trashfire.metrics import registry
from trashfire.report.page import report_html
from trashfire.stages import aggregate, figures, timing


def tiny(tmp_path, *extra):
    return validate(compose(tiny_overrides(tmp_path, *extra), conf=ROOT / "conf"))


def train_record(cell, **changes) -> TrainRecord:
    return TrainRecord(
        train_hash=cell.hash,
        config=cell.spec,
        **schema.cell_labels(cell, cell.defence),
        n_train=320,
        n_test=80,
        acc_ben=0.9,
        t_train_process=0.01,
        t_train_wall=0.02,
        t_predict_process=1e-4,
        t_predict_wall=2e-4,
        device="cpu",
        threads=1,
        **changes,
    )


def test_one_label_block_from_a_train_cell_or_its_record(tmp_path):
    cfg = tiny(tmp_path, "defence=[none,gauss_in,conf]")
    for model in model_cells(cfg):
        record = TrainRecord.from_json(json.loads(json.dumps(train_record(model.train).to_json())))
        labels = schema.cell_labels(record, model.defence)
        assert list(labels) == schema.MODEL_LABELS
        assert labels == schema.cell_labels(model.train, model.defence)
    conf = next(m for m in model_cells(cfg) if m.defence["name"] == "conf")
    assert schema.cell_labels(conf.train, conf.defence)["defence_param"] == conf.defence["param"]


def test_the_attack_family_has_one_label_and_one_identifier():
    assert schema.attack_family("fgm", "inf") == "fgm linf" and schema.attack_family("pixel", "0") == "pixel l0"
    series = schema.attack_family(pd.Series(["fgm", "pgd"]), pd.Series(["2", "inf"]))
    assert series.tolist() == ["fgm l2", "pgd linf"]
    assert [schema.family_identifier(f) for f in ("fgm linf", "pgd l2", "hsj l2")] == ["fgm_inf", "pgd_2", "hsj_2"]


def test_eps_converts_between_pixel_and_standardised_units_in_one_place():
    assert schema.to_standardised(0.3, "pixel", 0.3) == pytest.approx(1.0) and schema.to_standardised(0.3, "standardised", 0.3) == 0.3
    assert schema.to_pixel(0.3, "pixel", 0.4) == 0.3 and schema.to_pixel(1.0, "standardised", 0.4) == 0.4
    assert schema.convert_eps(0.12, "pixel", "standardised", 0.4) == pytest.approx(0.3)
    values, units = pd.Series([0.1, 0.3]), pd.Series(["pixel", "standardised"])
    assert schema.to_standardised(values, units, 0.5).tolist() == pytest.approx([0.2, 0.3])
    assert schema.to_pixel(values, units, 0.5).tolist() == pytest.approx([0.1, 0.15])  # a pixel eps is stored, not recomputed
    assert attack_strength({"value": 0.3, "units": "pixel"}, 0.3) == schema.to_standardised(0.3, "pixel", 0.3)


def attack_record(**changes) -> dict:
    record = {
        "attack_hash": "a",
        "train_hash": "t",
        "model_hash": "m",
        "dataset": "digits",
        "seed": 0,
        "model": "resnet18",
        "depth": 18,
        "epochs": 1,
        "lr": 0.05,
        "defence": "none",
        "defence_param": None,
        "defence_value": 0,
        "n_train": 320,
        "t_train_process": 0.1,
        "t_train_wall": 0.1,
        "acc_ben": 0.9,
        "t_predict_process": 1e-4,
        "t_predict_wall": 1e-4,
        "attack": "pgd",
        "norm": "inf",
        "attack_param": "eps",
        "attack_value": 0.3,
        "n_attack": 20,
        "acc_adv": 0.5,
        "t_attack_process": 0.01,
        "t_attack_wall": 0.01,
    }
    return record | changes


def test_an_attack_record_stores_its_eps_once_and_reads_older_records():
    record = AttackRecord.from_json(attack_record(attack_units="pixel", pixel_std=0.4))
    assert record.to_json()["attack_value_standardised"] == pytest.approx(0.75)  # derived for readers of the file
    assert record.attack_value == 0.3 and record.pretrained_on is None
    older = AttackRecord.from_json(attack_record(attack_units="pixel", attack_value_standardised=0.75))  # before pixel_std was kept
    assert older.pixel_std == pytest.approx(0.4)
    row = AttackRecord.from_json(attack_record()).row()
    assert "config" not in row and "n_events" not in row and "engine" not in row  # an old record has no column for them
    assert "pretrained_on" in row and np.isnan(row["pixel_std"])


def test_a_record_file_carries_the_schema_version_and_an_older_one_is_migrated_on_read(tmp_path):
    """Every record is written at schema.SCHEMA_VERSION; a file without the key is version 1,
    brought up to date one migration at a time (an attack record's pixel_std from its two eps
    values); a file from a newer trashfire is refused with one line."""
    path = tmp_path / "a.json"
    AttackRecord.from_json(attack_record(attack_units="pixel", pixel_std=0.4)).write(path)
    written = json.loads(path.read_text())
    assert written[schema.VERSION_KEY] == schema.SCHEMA_VERSION == 2 and list(written) == sorted(written)
    assert AttackRecord.read(path) == AttackRecord.from_json(attack_record(attack_units="pixel", pixel_std=0.4))
    version_1 = attack_record(attack_units="pixel", attack_value_standardised=0.75)
    assert schema.VERSION_KEY not in version_1 and AttackRecord.from_json(version_1).pixel_std == pytest.approx(0.4)
    assert np.isnan(AttackRecord.from_json(attack_record()).pixel_std)  # a standardised strength has no ratio to keep
    assert AttackRecord.migrated(version_1)[schema.VERSION_KEY] == 2 and "pixel_std" not in version_1  # the input is left as it was
    for newer in (3, "2", 0):
        with pytest.raises(
            DataError, match=rf"record a.json: schema_version {newer!r}; this trashfire reads 1 to 2: update trashfire, or delete it and rerun the attack stage"
        ):
            AttackRecord.from_json(attack_record(schema_version=newer), "a.json")


def test_the_label_block_is_declared_once_in_the_records_base():
    assert schema.MODEL_LABELS == ["dataset", "pretrained_on", "seed", "model", "depth", "epochs", "lr", "defence", "defence_param", "defence_value"]
    assert schema.TRAINED_LABELS == schema.MODEL_LABELS[:7] and schema.DEFENCE_LABELS == schema.MODEL_LABELS[7:]  # the tables' order
    for record in (TrainRecord, AttackRecord, BrittleRecord):
        assert issubclass(record, schema.ModelLabels) and not set(record.__annotations__) & set(schema.MODEL_LABELS), record
    record = AttackRecord.from_json(attack_record())
    assert list(record.to_json()) == sorted(record.to_json())  # on disk keys are sorted: where a field is declared changes no file
    assert record.pretrained_on is None  # older records lack it


def test_a_record_names_what_it_lacks_and_the_stage_to_rerun():
    with pytest.raises(DataError, match=r"corrupt record x\.json: no attack, acc_ben, acc_adv, t_train_process, .*rerun the attack stage"):
        AttackRecord.from_json({"dataset": "digits"}, "x.json")
    with pytest.raises(DataError, match="no train_hash, config, .*rerun the train stage"):
        TrainRecord.from_json({}, "t.json")
    with pytest.raises(DataError, match="o.npz: outcome arrays without margin_ben, .*duration_process"):
        Outcomes.of({"y_true": np.zeros(2), "y_pred_ben": np.zeros(2), "y_pred_adv": np.zeros(2)}, "o.npz")


# --- every table as the stages write it --------------------------------------------------


def record_run(cfg) -> Path:
    """Hand-made attack records, outcome arrays and brittle records at the grid's hashes, the
    timing stage on them, and the survival stage's two tables: what aggregate reads."""
    rng = np.random.default_rng(0)
    n = 10
    for cell in attack_cells(cfg):
        model = cell.model
        y_true = rng.integers(0, 10, n)
        y_ben = y_true.copy()
        y_ben[0] = (y_true[0] + 1) % 10  # one wrong before the attack
        broken = rng.random(n) < min(0.9, 0.2 + 0.5 * cell.value + 0.1 * (model.defence["name"] != "none"))
        y_adv = np.where(broken, (y_true + 1) % 10, y_ben)
        event = y_adv != y_true
        outcomes = Outcomes(
            position=np.arange(n),
            y_true=y_true,
            y_pred_ben=y_ben,
            y_pred_adv=y_adv,
            margin_ben=rng.normal(size=n),
            failure_step=np.where(event, 1, -1),
            event=event,
            queries=np.where(event, 2, 11),
            gradients=np.where(event, 1, 10),
            flops=np.where(event, 3000, 31000),
            duration_process=rng.uniform(0.005, 0.015, n),
            duration_wall=rng.uniform(0.005, 0.015, n),
            duration_process_shared=rng.uniform(0.005, 0.015, n),
            duration_wall_shared=rng.uniform(0.005, 0.015, n),
            norm_l0=np.zeros(n),
            norm_l1=np.zeros(n),
            norm_l2=np.zeros(n),
            norm_linf=np.zeros(n),
        )
        AttackRecord(
            attack_hash=cell.hash,
            train_hash=model.train.hash,
            model_hash=model.hash,
            **schema.cell_labels(model.train, model.defence),
            n_train=320,
            t_train_process=0.02,
            t_train_wall=0.03,
            acc_ben=0.9,
            t_predict_process=1e-4,
            t_predict_wall=2e-4,
            attack=cell.attack,
            norm=cell.norm,
            attack_param=cell.param,
            attack_value=cell.value,
            n_attack=n,
            acc_adv=float(np.mean(y_adv == y_true)),
            t_attack_process=0.01,
            t_attack_wall=0.012,
            attack_units=cell.spec.get("units", "standardised"),
            pixel_std=0.4,
            config=cell.spec,
            engine="torch",
            early_exit=True,
            n_events=int(event.sum()),
            acc_ben_attack_subset=0.9,
            device="cpu",
            threads=1,
            t_train_flops=3e9,
            t_predict_flops=1000.0,
            t_attack_flops=float(outcomes.flops.mean()),
            flops_forward=1000,
            flops_gradient=2000,
            rates={"steps": {"process": 1e-9, "wall": 1.2e-9, "spread_process": 0.1, "spread_wall": 0.1, "units": 2, "source": "laps"}},
            seconds_per_flop_process=1e-9,
            seconds_per_flop_wall=1.2e-9,
        ).write(attack_record_path(cfg.paths.attacks, cell.hash))
        write_npz(outcomes_path(cfg.paths.attacks, cell.hash), **outcomes.to_arrays())
    reports = Path(cfg.paths.reports)
    settings = brittle_settings(cfg)
    for number, model in enumerate(model_cells(cfg)):  # noqa: B007
        BrittleRecord(
            brittle_hash=brittle_hash(model.hash, settings),
            model_hash=model.hash,
            train_hash=model.train.hash,
            **schema.cell_labels(model.train, model.defence),
            n_samples=3,
            n_features_mean=4.0,
            brittle_score=0.1 + 0.01 * number,
            brittle_score_sd=0.01,
            image_scores=[0.1, 0.1, 0.1],
            positions=[0, 1, 2],
            lime_samples=settings["lime_samples"],
            perturbations_per_eval=settings["perturbations_per_eval"],
            brittle_seed=settings["seed"],
            segments=settings["segments"],
            t_brittle_process=0.5,
            t_brittle_wall=0.5,
            device="cpu",
        ).write(brittle_record_path(reports / "brittle", brittle_hash(model.hash, settings)))
    write_current_scores(reports / "brittle_scores.json", reports / "brittle", [model.hash for model in model_cells(cfg)], settings)
    experiments, _ = timing.run(cfg)
    (reports / "survival").mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"attack_hash": experiments["attack_hash"], "E_T": 0.01}).to_csv(reports / "survival" / "expected_times.csv", index=False)
    pd.DataFrame(
        {
            "fitter": ["weibull", "runtime_baseline", "failure_share_baseline"],
            "model": ["Weibull AFT", "Runtime", "Failure share"],
            "status": ["fitted", "baseline", "baseline"],
            "test_concordance": [0.7, 0.6, 0.55],
            "test_ICI": [0.02, np.nan, np.nan],
            "beats_baselines": [True, np.nan, np.nan],
            "split_by": "train_hash",
            "selected": [True, False, False],
        },
    ).to_csv(reports / "survival" / "aft_comparison.csv", index=False)
    return reports


@pytest.fixture
def recorded(tmp_path):
    cfg = tiny(tmp_path, "defence=[none,conf]")
    record_run(cfg)
    return cfg


def header(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        return list(read_table(path).columns)
    return path.read_text().splitlines()[0].split(",")


def test_every_table_the_stages_write_has_the_schema_columns(recorded):
    reports = Path(recorded.paths.reports)
    summary = aggregate.run(recorded)
    assert header(reports / "experiments.csv") == schema.EXPERIMENTS
    survival = read_table(reports / "survival_data.parquet")
    assert list(survival.columns)[: len(schema.SURVIVAL_IDS)] == schema.SURVIVAL_IDS
    assert set(survival["attack_family"]) == {"fgm linf", "pgd linf"}  # the label every table uses
    assert "attack_pgd_inf" in survival  # its identifier names the dummy (fgm linf is the reference)
    columns = {
        "trash.csv": schema.TRASH,
        "trash_summary.csv": schema.TRASH_SUMMARY,
        "curves.csv": schema.CURVES,
        "evp_tau.csv": schema.EVP_TAU,
        "evp_convergence.csv": schema.EVP_CONVERGENCE,
        "auc_table.csv": schema.AUC_TABLE,
        "tau_table.csv": schema.TAU_TABLE,
        "brittle.csv": BRITTLE,
        "findings.csv": schema.FINDINGS,
        "robustness.csv": schema.robustness_columns(registry.curve_metric_names()),
        "eps_survival_data.parquet": schema.EPS_SURVIVAL_DATA,
        "eps_survival.csv": schema.EPS_SURVIVAL,
        "eps_survival_curves.csv": schema.EPS_SURVIVAL_CURVES,
    }
    for name, expected in columns.items():
        assert header(reports / name) == expected, name
    assert set(pd.read_csv(reports / "trash.csv")["attack_family"]) == {"fgm linf", "pgd linf"}
    for name in ("eps_survival.csv", "eps_survival_curves.csv"):  # and the ensemble of the two per sample
        assert set(pd.read_csv(reports / name)["attack_family"]) == {"fgm linf", "pgd linf", "ensemble linf"}, name
    for name in ("robustness.csv", "curves.csv"):  # and the worst case per sample over the two, and their ensemble
        assert set(pd.read_csv(reports / name)["attack_family"]) == {"fgm linf", "pgd linf", "worst_case linf", "ensemble linf"}, name
    card = json.loads(sorted((reports / "cards").glob("*.json"))[0].read_text())
    assert set(card["training"]) == set(schema.CARD_TRAINING) and set(card["times_per_sample"]) == set(schema.CARD_TIMES)
    cell = card["model_cells"][0]
    assert set(cell["defence"]) == set(schema.CARD_DEFENCE) and set(cell["attacks"][0]) == set(schema.CARD_ATTACK)
    assert set(cell["worst_case"][0]) == set(schema.CARD_WORST_CASE) and cell["worst_case"][0]["evaluation"].startswith("worst case per sample over fgm, pgd")
    assert set(cell["survival_and_trash"][0]) == set(schema.CARD_FAMILY)
    assert set(cell["evp_and_auc"][0]) == set(schema.card_robustness(registry.curve_metric_names()))
    assert set(json.loads((reports / "metrics.json").read_text())) == {m.name for m in registry.HEADLINE} == set(summary)


def test_curves_keep_a_pixel_eps_as_configured(tmp_path):
    cfg = tiny(tmp_path, "defence=[none]", "attack=[pgd]", "attack.pgd.units=pixel", "attack.pgd.values=[0.1,0.3]")
    record_run(cfg)
    aggregate.run(cfg)
    curves = pd.read_csv(Path(cfg.paths.reports) / "curves.csv")
    records = [AttackRecord.read(attack_record_path(cfg.paths.attacks, c.hash)) for c in attack_cells(cfg)]
    assert {r.attack_units for r in records} == {"pixel"}
    assert sorted(curves["eps_pixel"].unique()) == [0.0, 0.1, 0.3]  # exactly as configured, not 0.3 / std * std
    assert curves["eps_standardised"].max() == schema.to_standardised(0.3, "pixel", 0.4)


def test_the_report_reads_the_tables_through_the_schema(recorded):
    aggregate.run(recorded)
    reports = Path(recorded.paths.reports)
    page = report_html(artefacts_of(figures, reports=reports), []).read_text()
    assert "fgm linf" in page and "fgm_inf" not in page
    for name, meaning in registry.meanings().items():
        assert f'<td class="t m">{name}' in page and escape(meaning) in page, name  # every headline metric with its sentence


def _cells_at(*positions) -> list[Outcomes]:
    return [Outcomes.of({name: np.zeros(len(at), int) for name in Outcomes.required()} | {"position": np.asarray(at)}) for at in positions]


@pytest.mark.parametrize(
    "positions",
    [([0, 2, 4, 6], [2, 3, 4, 9]), ([6, 2, 0, 4], [9, 4, 3, 2]), ([3, 3, 1], [1, 3, 5]), ([5, 1, 3],), ([0, 1, 2], [], [1, 2])],
    ids=["ascending", "any-order", "repeated", "one-cell", "one-empty"],
)
def test_the_positions_cells_share_and_each_cells_rows_at_them(positions):
    """What a worst case, a distance and survival in eps read of several cells: the positions
    all of them attacked (in ascending order, one cell's as it has them), and each cell's row
    at each of them, whether a cell's positions come sorted, as the attack stage writes them, or not."""
    cells = _cells_at(*positions)
    shared = Outcomes.shared_positions(cells)
    expected = np.asarray(positions[0]) if len(positions) == 1 else sorted(set.intersection(*(set(p) for p in positions)))
    assert shared.tolist() == list(expected)
    for cell, at in zip(cells, positions):
        rows = cell.rows_at(shared)
        assert [at[row] for row in rows] == shared.tolist()
