"""The layout's rules, checked from the source: stages are thin and import only the library,
the library never imports a stage, and dvc.yaml is what the stage declarations generate."""

import ast
import graphlib
import pickle
import pkgutil
import re
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError

import trashfire
from tests.conftest import ROOT
from trashfire import dvc_yaml
from trashfire.core.config import compose
from trashfire.core.stage import Stage
from trashfire.stages import ORDER

ENTRY_POINTS = {"trashfire.params", "trashfire.experiment", "trashfire.dvc_yaml"}  # command-line tools over the stages
STAGE_NAMES = {"STAGE", "run", "main"}
# docs/design.md's floors, in pipeline order: a package imports only its own floor and those
# below. The stages, the sweeper and the command-line tools sit above them all.
FLOORS = ("core", "data", "models", "attacks", "budget", "brittle", "tables", "survival", "metrics", "report")


def all_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(trashfire.__path__, "trashfire."))


def test_every_dvc_stage_has_a_stage_module_and_nothing_else_is_one():
    stage_modules = {m.rpartition(".")[2] for m in all_modules() if m.startswith("trashfire.stages.")}
    assert stage_modules == set(ORDER)


@pytest.mark.parametrize("stage", ORDER)
def test_a_stage_module_is_a_thin_shell_over_the_library(stage):
    module = f"trashfire.stages.{stage}"
    tree = ast.parse(dvc_yaml.module_file(module).read_text())
    defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    defined |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    assert defined == STAGE_NAMES, f"{module} defines {sorted(defined - STAGE_NAMES)} beside STAGE, run and main: move it into the library"
    imported = dvc_yaml.imported_modules(module)
    stages = sorted(m for m in imported if m.startswith("trashfire.stages.") or m in ENTRY_POINTS)
    assert not stages, f"{module} imports {stages}: stages import the library, never each other"


def test_the_library_never_imports_a_stage_or_a_command():
    offenders = {}
    for module in all_modules():
        if module.startswith("trashfire.stages") or module in ENTRY_POINTS:
            continue
        bad = sorted(m for m in dvc_yaml.imported_modules(module) if m.startswith("trashfire.stages") or m in ENTRY_POINTS)
        if bad:
            offenders[module] = bad
    assert not offenders, f"library modules import stages or commands: {offenders}"


def test_the_import_closure_follows_function_level_imports(tmp_path):
    closure = dvc_yaml.import_closure("trashfire.stages.attack")
    assert {"trashfire.attacks.engine", "trashfire.models.training", "trashfire.core.stage"} <= closure
    assert not any(m.startswith("trashfire.report") for m in closure)  # the attack stage does not draw


# each stage's own config section (docs/design.md, "Config sections"): named as the stage but
# aggregate's (`metrics`) and figures' (`report`); prepare has none
OWN_SECTION = {stage: stage for stage in ORDER} | {"prepare": None, "aggregate": "metrics", "figures": "report"}
# what several stages read: the grid every stage after prepare names its cells by, the paths,
# and the analysis-wide choices; and the budget stage's keys the survival stage's cure models
# and aggregate's validity flag repeat
SHARED_SECTIONS = ("data", "split", "model", "defence", "train", "attack", "defence_cell", "paths", "compute", "clock", "viability")
SHARED_KEYS = ("budget.factor", "budget.draws", "budget.seed", "budget.share")


def foreign_params(stage: str, params: list[str]) -> list[str]:
    """The params of `stage` in another stage's section that are not shared."""
    own = OWN_SECTION[stage]
    return [key for key in params if key.split(".")[0] not in (own, *SHARED_SECTIONS) and key not in SHARED_KEYS]


@pytest.mark.parametrize("stage", ORDER)
def test_a_stage_reads_its_own_section_and_the_shared_ones_only(stage):
    """dvc.yaml's params of a stage read like the stage (issue 63): its own section, the
    shared ones docs/design.md lists, and nothing of another stage's."""
    params = generated_stages()[stage].get("params", [])
    assert not foreign_params(stage, params), f"{stage} reads another stage's settings: {foreign_params(stage, params)}"


def test_the_shared_sections_are_the_ones_the_design_lists():
    design = (ROOT / "docs" / "design.md").read_text()
    listed = design[design.index("**Config sections.**") : design.index("Each data, model, defence and attack option states")]
    assert all(f"`{name}`" in listed for name in (*SHARED_SECTIONS, *SHARED_KEYS) if name not in ("budget.draws", "budget.seed")), (
        "docs/design.md's Config sections lists every shared one"
    )
    assert foreign_params("survival", ["survival", "metrics.evp"]) == ["metrics.evp"]  # the check sees an offender


def test_dvc_yaml_is_what_the_stage_declarations_generate():
    assert (ROOT / "dvc.yaml").read_text() == dvc_yaml.render(), "dvc.yaml is stale: run `make dvc-yaml`"


def test_dvc_yaml_check_names_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "dvc.yaml"
    stale.write_text(dvc_yaml.render().replace("- paths.models\n", "", 1))
    with pytest.raises(SystemExit) as exit_:
        dvc_yaml.main(["--check", "--path", str(stale)])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "stale" in err and "+    - paths.models" in err


@pytest.mark.parametrize("stage", ORDER)
def test_every_declared_param_exists_in_the_default_config(stage):
    cfg = compose()
    declared = __import__(f"trashfire.stages.{stage}", fromlist=["STAGE"]).STAGE.dvc_params()
    absent = [key for key in declared if OmegaConf.select(cfg, key, default="<absent>") == "<absent>"]
    assert not absent, f"{stage} declares params the default config does not have: {absent}"


def test_a_stage_view_has_only_the_declared_keys():
    cfg = compose()
    view = Stage("demo", params=("timing.survival_data", "paths.reports")).view(cfg)
    assert view.timing.survival_data == cfg.timing.survival_data
    with pytest.raises(ConfigAttributeError):
        view.attack  # noqa: B018 -- reading an undeclared section is the error
    with pytest.raises(ConfigAttributeError):
        view.timing.eps_survival  # noqa: B018 -- a sibling of a declared key too
    with pytest.raises(ConfigAttributeError):
        view.paths  # noqa: B018 -- paths come resolved, as the stage's artefacts


DEMO = Stage(
    "demo",
    params=("paths.attacks", "paths.reports"),
    deps=("{attacks}", "{reports}/experiments.csv"),
    outs=("{reports}/survival", {"{reports}/report.html": {"cache": False}}),
    metrics=({"{reports}/metrics.json": {"cache": False}},),
)


def test_a_stage_hands_its_library_the_declared_paths_resolved_and_refuses_others(tmp_path):
    cfg = OmegaConf.create({"paths": {"attacks": str(tmp_path / "a"), "reports": str(tmp_path / "r") + "/"}})
    artefacts = DEMO.resolved(cfg)
    assert artefacts.reads == {"attacks": tmp_path / "a", "experiments.csv": tmp_path / "r" / "experiments.csv"}
    assert artefacts.writes == {
        "survival": tmp_path / "r" / "survival",
        "report.html": tmp_path / "r" / "report.html",
        "metrics.json": tmp_path / "r" / "metrics.json",
    }
    assert artefacts.output("survival/km_check.csv") == tmp_path / "r" / "survival" / "km_check.csv"  # inside a declared folder
    assert pickle.loads(pickle.dumps(artefacts)) == artefacts  # worker processes get them too
    with pytest.raises(KeyError, match="stage 'demo' declares no 'trash.csv' in its deps \\(attacks, experiments.csv\\); add it to its STAGE"):
        artefacts.input("trash.csv")
    with pytest.raises(KeyError, match="declares no 'experiments.csv' in its outs or metrics"):
        artefacts.output("experiments.csv")  # an input is not an output
    with pytest.raises(TypeError, match="two artefacts share a name"):
        Stage("twice", params=("paths.attacks", "paths.reports"), deps=("{attacks}/x.csv",), outs=("{reports}/x.csv",))


def test_a_folded_key_is_declared_to_dvc_beside_the_key_it_narrows():
    assert Stage("demo", params=("defence", "train")).dvc_params() == ["defence", "train", "defence_cell"]


@pytest.mark.parametrize("stage", ["timing", "survival", "aggregate", "figures"])
def test_a_table_stage_never_loads_torch_art_or_captum(stage):
    """timing, survival, aggregate and figures read records and tables: loading torch and ART
    (1.3 s and several hundred MB each time) would be paid by every `dvc repro` of a metric.
    Validating a config finds every package's checks, which must not import the packages
    without checks (`trashfire.attacks` loads ART); limiting the threads of a stage's work
    (survival's fits) sets torch's only where torch is loaded."""
    heavy = ("torch", "art", "captum", "torchvision")
    closure = sorted(dvc_yaml.import_closure(f"trashfire.stages.{stage}"))  # the shell loads its library in run
    probe = (
        f"import sys, importlib; [importlib.import_module(m) for m in {closure!r}]\n"
        "from trashfire.core.checks import registered; registered()\n"
        "from trashfire.core.parallel import threads_limited\nwith threads_limited(1): pass\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "", f"trashfire.stages.{stage} loads {loaded}"


def floor_of(module: str) -> int:
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 1 and parts[1] in FLOORS else len(FLOORS)


def import_graph() -> dict[str, set[str]]:
    """Each module's trashfire imports, less the packages it sits in (importing a submodule
    runs its package's __init__, which is no dependency of the module's own)."""
    return {module: {name for name in dvc_yaml.imported_modules(module) if name != module and not module.startswith(name + ".")} for module in all_modules()}


def test_every_package_is_on_a_floor():
    packages = {m.split(".")[1] for m in all_modules() if m.count(".") >= 2 and m.split(".")[1] not in ("stages", "sweep")}  # above the floors
    assert packages <= set(FLOORS), f"packages on no floor: {sorted(packages - set(FLOORS))}: add them to FLOORS and docs/design.md"


def test_imports_only_go_down_the_floors():
    upward = sorted(f"{module} -> {name}" for module, names in import_graph().items() for name in names if floor_of(name) > floor_of(module))
    assert len(upward) == 0, f"{len(upward)} upward imports: {upward}"


def test_the_import_graph_has_no_circles():
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as err:
        pytest.fail(f"import circle: {' -> '.join(err.args[1])}")


def test_the_floor_check_sees_an_upward_import_and_a_circle():
    assert floor_of("trashfire.core.config") < floor_of("trashfire.tables.survival_data") < floor_of("trashfire.stages.timing")
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).prepare()


def test_core_names_no_domain_package():
    core = {module: names for module, names in import_graph().items() if module.startswith("trashfire.core")}
    assert {name for names in core.values() for name in names} <= {m for m in all_modules() if m.startswith("trashfire.core")} | {"trashfire"}


def test_a_stage_artefact_is_a_path_under_a_declared_paths_key(tmp_path):
    with pytest.raises(TypeError, match="paths.models"):
        Stage("demo", params=("paths.reports",), outs=("{models}",))
    with pytest.raises(TypeError, match="no path under"):
        Stage("demo", params=("paths.reports",), outs=("reports/x.csv",))
    stage = Stage("demo", params=("paths.reports",), deps=("{reports}/in.csv",), outs=({"{reports}/x.csv": {"cache": False}},))
    assert stage.dvc("outs") == [{"${paths.reports}/x.csv": {"cache": False}}]  # DVC resolves it from params.yaml
    layout = OmegaConf.create({"paths": {"reports": str(tmp_path / "elsewhere")}})
    assert stage.outputs(layout) == [tmp_path / "elsewhere" / "x.csv"] and stage.inputs(layout) == [tmp_path / "elsewhere" / "in.csv"]


# --- domain code out of core ---------------------------------------------------------------

# each stage's own package: its checks may be its code deps, another domain's never are
STAGE_DOMAIN = {
    "prepare": "data",
    "train": "models",
    "attack": "attacks",
    "certify": "attacks",
    "budget": "budget",
    "brittle": "brittle",
    "timing": "tables",
    "survival": "survival",
    "aggregate": "metrics",
    "figures": "report",
}
DOMAIN_WORDS = re.compile(r"attack|defen[cs]e|brittle|lime", re.IGNORECASE)
# the grid keys the cells of every group (data, model, defence, attack) and the schema lays out
# the records and tables of every floor: they name the groups, and define no setting of them
CELL_KEYS_AND_LAYOUTS = ("trashfire.core.grid", "trashfire.core.schema")
DOMAIN_KEYS = ("attack.", "defence.", "brittle.", "metrics.brittle")


def top_level_names(module: str) -> set[str]:
    tree = ast.parse(dvc_yaml.module_file(module).read_text())
    names = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    return names | {
        t.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for t in getattr(node, "targets", [getattr(node, "target", None)])
        if isinstance(t, ast.Name)
    }


def config_errors_about(module: str, prefixes: tuple[str, ...]) -> list[str]:
    """The literal keys of the ConfigErrors a module raises that start with a prefix."""
    found = []
    for node in ast.walk(ast.parse(dvc_yaml.module_file(module).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ConfigError" and node.args:
            key = node.args[0]
            text = (
                key.value
                if isinstance(key, ast.Constant)
                else key.values[0].value
                if isinstance(key, ast.JoinedStr) and key.values and isinstance(key.values[0], ast.Constant)
                else ""
            )
            if isinstance(text, str) and text.startswith(prefixes):
                found.append(text)
    return found


def core_modules() -> list[str]:
    return [m for m in all_modules() if m.startswith("trashfire.core.") and not m.startswith(CELL_KEYS_AND_LAYOUTS)]


def test_core_defines_no_attack_defence_or_brittle_setting():
    """Attack and defence checks, AutoAttack's versions and brittle's settings live in their
    packages (`attacks/checks.py`, `attacks/loops/autoattack.py`, `models/checks.py`, `brittle/spec.py`):
    no core module defines a name about them or refuses a key of theirs."""
    named = {module: sorted(n for n in top_level_names(module) if DOMAIN_WORDS.search(n)) for module in core_modules()}
    assert not {m: n for m, n in named.items() if n}, f"core defines domain settings: { {m: n for m, n in named.items() if n} }"
    refused = {module: config_errors_about(module, DOMAIN_KEYS) for module in [*core_modules(), "trashfire.core.grid"]}
    assert not {m: k for m, k in refused.items() if k}, f"core checks domain keys: { {m: k for m, k in refused.items() if k} }"
    for moved in ("trashfire.attacks.loops.autoattack", "trashfire.attacks.checks", "trashfire.brittle.spec"):
        assert dvc_yaml.module_file(moved) is not None


def test_the_core_check_sees_a_domain_setting(tmp_path, monkeypatch):
    """The check above fails on what it is meant to find."""
    source = tmp_path / "probe.py"
    source.write_text('ENGINES = ("torch",)\ndef brittle_hash(x): pass\ndef check(spec):\n    raise ConfigError(f"attack.{spec}.engine", "bad")\n')
    monkeypatch.setattr(dvc_yaml, "module_file", lambda module: source)
    assert [n for n in top_level_names("probe") if DOMAIN_WORDS.search(n)] == ["brittle_hash"]
    assert config_errors_about("probe", DOMAIN_KEYS) == ["attack."]


def domain_checks_in_deps(stage: str, deps: list[str]) -> list[str]:
    """The checks modules of other packages among a stage's code deps."""
    own = {"src/trashfire/core/checks.py", f"src/trashfire/{STAGE_DOMAIN[stage]}/checks.py"}
    return [dep for dep in deps if dep.startswith("src/trashfire/") and dep.endswith("/checks.py") and dep not in own]


def generated_stages() -> dict[str, dict]:
    return yaml.safe_load(dvc_yaml.render())["stages"]


def test_no_stage_depends_on_another_domains_checks():
    """A stage validates the whole config (every package's registered checks run), but a
    stricter attack check must not rerun prepare: checks are found at run time, not imported."""
    assert set(STAGE_DOMAIN) == set(ORDER)
    offenders = {stage: domain_checks_in_deps(stage, entry["deps"]) for stage, entry in generated_stages().items()}
    assert not {s: d for s, d in offenders.items() if d}, offenders
    assert domain_checks_in_deps("prepare", ["src/trashfire/attacks/checks.py", "src/trashfire/data/checks.py"]) == ["src/trashfire/attacks/checks.py"]


def test_editing_attack_versions_reruns_only_attack_and_the_stages_after_it():
    """AutoAttack's version table is the attack stage's code: DVC reruns a stage whose code
    deps changed, so prepare and train must not list it (they did while it sat in core). A
    loop that no import statement names (trashfire.attacks.loops loads fgm by name) is the
    attack stage's code all the same."""
    stages = generated_stages()
    for module in ("src/trashfire/attacks/loops/autoattack.py", "src/trashfire/attacks/loops/fgm.py"):
        listing = [stage for stage, entry in stages.items() if module in entry["deps"]]
        assert "attack" in listing, module
        assert all(ORDER.index(stage) >= ORDER.index("attack") for stage in listing), listing


def test_the_light_attack_modules_load_neither_torch_nor_art():
    """The validator and the table stages read trashfire.attacks' spec, store, loops (every
    loop's declaration) and checks: the package itself must import nothing heavy."""
    probe = (
        "import sys\nimport trashfire.attacks, trashfire.attacks.spec, trashfire.attacks.store, trashfire.attacks.checks\n"
        "from trashfire.attacks import loops\n[loops.loop(name) for name in loops.names()]\n"
        "import trashfire.brittle.spec, trashfire.models.spec\n"
        "print(','.join(m for m in ('torch', 'art', 'captum') if m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() == ""


def test_the_torch_loops_are_declared_once():
    """Each torch loop is a module of trashfire.attacks.loops that declares itself under its
    module's name; the engine, AutoAttack's runner and the validator read that declaration
    (no second list of loops anywhere in the package)."""
    from trashfire.attacks import loops

    assert set(loops.names()) == {"apgd", "autoattack", "ddn", "deepfool", "fab", "fgm", "fmn", "pgd", "square"}
    assert all(loops.loop(name).name == name for name in loops.names())
    assert loops.components() == ("apgd", "fab", "square")
    for path in (ROOT / "src" / "trashfire" / "attacks").glob("*.py"):
        assert not re.search(r'(^|[{,])\s*"(fgm|pgd|deepfool|fmn|ddn)"\s*:', path.read_text(), re.MULTILINE), f"{path.name} lists loops by name"
