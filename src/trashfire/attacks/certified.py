"""The certify stage's tables when certification is off (`certify.enabled: false`): both with
their header and no rows, written without loading torch or ART, so that the default's stage
stays about a second (trashfire.attacks.certification does the work when it is on)."""

from __future__ import annotations

import pandas as pd

from trashfire.core import schema
from trashfire.core.records import write_csv
from trashfire.core.stage import Artefacts


def no_certificate(artefacts: Artefacts) -> pd.DataFrame:
    write_csv(pd.DataFrame(columns=schema.CERTIFIED_SAMPLES), artefacts.output("certified_samples.csv"))
    table = pd.DataFrame(columns=schema.CERTIFIED)
    write_csv(table, artefacts.output("certified.csv"))
    return table
