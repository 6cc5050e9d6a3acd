"""Model cards: each model cell carries timing's `degenerate` flag."""

import json

import numpy as np
import pandas as pd

from trashfire.core import schema
from trashfire.metrics import cards
from trashfire.metrics.registry import curve_metric_names


def experiments(flags: list) -> pd.DataFrame:
    """One trained cell with a model cell per flag; every column a card reads, with dummy values."""
    base = {column: 0.0 for column in schema.CARD_TRAINING + schema.CARD_TIMES + schema.CARD_ATTACK}
    rows = [
        base
        | {
            "train_hash": "t0",
            "model_hash": f"m{i}",
            "defence": f"d{i}",
            "defence_param": "",
            "defence_value": 0.0,
            "acc_ben": 0.1 if flag is True else 0.9,
            "t_predict": 1e-4,
            "degenerate": flag,
        }
        for i, flag in enumerate(flags)
    ]
    return pd.DataFrame(rows)


def written_cells(tmp_path, table: pd.DataFrame) -> dict[str, dict]:
    empty = {
        name: pd.DataFrame(columns=["model_hash", *columns])
        for name, columns in (
            ("trash", schema.CARD_FAMILY),
            ("robustness", schema.card_robustness(curve_metric_names())),
            ("brittle", ["brittle_score", "brittle_ri"]),
        )
    }
    [path] = cards.write_cards(tmp_path, table, empty["trash"], empty["robustness"], empty["brittle"])
    return {cell["model_hash"]: cell for cell in json.loads(path.read_text())["model_cells"]}


def test_each_model_cell_carries_its_degenerate_flag(tmp_path):
    cells = written_cells(tmp_path, experiments([True, False, np.nan]))
    assert [cells[h]["degenerate"] for h in ("m0", "m1", "m2")] == [True, False, False]  # NaN is no flag, not bool(NaN)


def test_cards_from_experiments_without_the_flag_say_not_degenerate(tmp_path):
    cells = written_cells(tmp_path, experiments([False, False]).drop(columns="degenerate"))
    assert all(cell["degenerate"] is False for cell in cells.values())
