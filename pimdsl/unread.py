"""What nothing reads: strategy names, op classes, params and links of a system that no run loop
declares, each a located warning (STYLE.md 7 and 17: a value nobody uses must not be silence).

The readers are the run loops. Each declares what it reads of a spec: `STRATEGIES` (the
`mapping.strategy` names it runs), `PARAMS` (mapping param -> meaning), `OP_CLASSES` (phase-block
keys it places beyond the standard op classes of `passes/placement.py`) and `LINKS` (how many of
the system's links it times, the first ones; 0 when it declares none; or a function `links_read(system)`
giving that number). Which loop reads a strategy
name is the driver's choice (`driver.loop_module`), so a name listed in `strategies = [...]` is
checked against the loop that would run it, and a param or op class against every such loop. A loop
that places ops its own way lists the phase-block entries it does not follow
(`placement_ignored(system)`); a loop that reads a construct only in part says so in
`not_read(system)`.
"""
from __future__ import annotations

from .driver import loop_module
from .loops import step
from .frontend.diagnostics import Diagnostics, did_you_mean
from .passes.placement import OP_CLASSES as STANDARD_OP_CLASSES


def _name(module) -> str:
    return module.__name__.rsplit(".", 1)[-1].replace("_", " ")


def check(system, diags: Diagnostics) -> None:
    """Warn, at its place in the spec, about each thing of `system` that no reader reads."""
    _context_fits(system, diags)
    module = loop_module(system)
    mapping = system.mapping
    if mapping is not None:
        _mapping_read(system, mapping, module, diags)
    _partly_read(system, (module,), diags)


def _mapping_read(system, mapping, module, diags: Diagnostics) -> None:
    """Warn about the strategies, params, op classes and placements of `mapping` that the loop
    `module` does not read."""
    loop = _name(module)
    for name in mapping.strategies or (mapping.strategy,):
        if name not in module.STRATEGIES:
            fallback = ": the step loop runs it as the default weight strategy" if module is step else ""
            diags.warning(f"strategy '{name}' is read by no run loop{fallback}", mapping.strategy_spans.get(name, mapping.span),
                          did_you_mean(name, module.STRATEGIES, f"strategies of the {loop} loop"))
    for name in mapping.params:
        if name not in module.PARAMS:
            diags.warning(f"mapping param '{name}' is read by nothing", mapping.param_spans.get(name, mapping.span),
                          did_you_mean(name, module.PARAMS, f"params the {loop} loop read"))
    classes = {*STANDARD_OP_CLASSES, *module.OP_CLASSES}
    for phase, table in mapping.placement.items():
        for name in table:
            if name not in classes:
                diags.warning(f"op class '{name}' matches no op: nothing places it",
                              mapping.placement_spans.get((phase, name), mapping.span),
                              did_you_mean(name, classes, "op classes"))
    for phase, key, instead in (module.placement_ignored(system) if hasattr(module, "placement_ignored") else ()):
        diags.warning(f"the {loop} loop does not read this placement: strategy '{mapping.strategy}' runs "
                      f"{phase} {key} on {instead}", mapping.placement_spans.get((phase, key), mapping.span),
                      f"write `{key} = {'pim' if instead == 'PIM' else instead};`, or remove the entry")


def _partly_read(system, readers, diags: Diagnostics) -> None:
    """What the loops read only in part (`not_read`), and the links past those they time."""
    for module in readers:
        for message, span, hint in (module.not_read(system) if hasattr(module, "not_read") else ()):
            diags.warning(message, span, hint)
    timed = max(m.links_read(system) if hasattr(m, "links_read") else getattr(m, "LINKS", 0) for m in readers)
    loops = " and ".join(_name(m) for m in readers) + (" loop" if len(readers) == 1 else " loops")
    verb = "times" if len(readers) == 1 else "time"
    for link in system.links[timed:]:
        what = f"{verb} only the first {timed} link(s)" if timed else f"{verb} no link"
        diags.warning(f"link '{link.name}' is read by nothing: the {loops} {what}", link.span,
                      "remove it from the system's links, or choose a loop that moves data over it")


def leading_links(system, kinds: tuple[str, ...]) -> int:
    """For a loop's `links_read`: how many of the system's first links are of the kinds it times
    (a loop that finds its links by kind reads those)."""
    n = 0
    for link in system.links:
        if link.kind not in kinds:
            break
        n += 1
    return n


def _context_fits(system, diags: Diagnostics) -> None:
    """A fixed-length workload whose context runs past the model's `max_seq_len`: the model defines no
    position there (learned position tables end; rotary models were not trained past it), so the run
    would time a model that does not exist. Request sets drawn from a dataset or a law are the
    loop's to admit."""
    model, workload = system.model, system.workload
    if model is None or workload is None or model.architecture == "graph":
        return
    if workload.requests_csv or workload.dataset not in (None, "fixed") or workload.distribution not in (None, "fixed"):
        return
    context = workload.input_len + (workload.output_len if model.architecture == "decoder" else 0)
    if context > model.max_seq_len:
        what = "input_len + output_len" if model.architecture == "decoder" else "input_len"
        diags.warning(f"workload '{workload.name}' reaches {context} tokens ({what}), past model '{model.name}''s "
                      f"max_seq_len of {model.max_seq_len}: the model defines no position there", workload.span,
                      f"shorten the workload to at most {model.max_seq_len} tokens, or raise the model's max_seq_len "
                      "if its source allows it")
