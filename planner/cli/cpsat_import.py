"""Importing OR-Tools' CP-SAT API without pandas, for the CLI's own process (issue 17).

``ortools.sat.python.cp_model`` imports pandas at its top for its pandas-indexed helpers
(``new_int_var_series``, ``CpSolver.values`` and the like), which planner never calls: 0.17 s
of the module's 0.29 s import on the 2-core machine (``python -X importtime -c "from
ortools.sat.python import cp_model"``, OR-Tools 9.15, pandas 3.1), paid by every ``plan``,
``min-hardware`` and ``sweep`` process. Its module body reads only ``pd.Index`` and
``pd.Series`` (in type annotations, and in ``isinstance`` checks inside those helpers).

``import_cp_model_without_pandas`` imports cp_model with a stand-in module in place of pandas
that holds just those two names, as empty classes, and takes the stand-in out of
``sys.modules`` right after, so a later ``import pandas`` anywhere in the process gets the real
library. Only cp_model keeps the stand-in, and with it only its pandas helpers would misbehave.
So the console script (planner.cli.run), which owns its process and never calls them, uses
it; planner imported as a library does not (a user's program may call those helpers on the
same cp_model module). If pandas is already loaded, or cp_model already imported, nothing
changes; if a future cp_model reads more of pandas at import, the stand-in import fails and
cp_model is imported as it is.
"""

from __future__ import annotations

import importlib
import sys
import types

CP_MODEL = "ortools.sat.python.cp_model"
PANDAS_NAMES_READ_AT_IMPORT = ("Index", "Series")


def import_cp_model_without_pandas() -> bool:
    """Import cp_model with the pandas stand-in (see the module's docstring). Returns whether
    the stand-in was used (False: pandas or cp_model was loaded already, or the stand-in did
    not suffice and cp_model was imported with pandas)."""
    if CP_MODEL in sys.modules or "pandas" in sys.modules:
        return False
    stand_in = types.ModuleType("pandas", "planner's stand-in for pandas (cpsat_import)")
    for name in PANDAS_NAMES_READ_AT_IMPORT:
        setattr(stand_in, name, type(name, (), {"__module__": "pandas"}))
    sys.modules["pandas"] = stand_in
    try:
        importlib.import_module(CP_MODEL)
        used = True
    except AttributeError:  # the module body reads another pandas name
        sys.modules.pop(CP_MODEL, None)
        used = False
    finally:
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
    if not used:
        importlib.import_module(CP_MODEL)
    return used
