"""Each semantic check, with its exact diagnostic text (golden)."""
import re
import textwrap

DRAM = """
dram D {
  family = ddr4; clock = 1600 MHz; data_rate = 3200 MT/s;
  organization { bank_groups = 4; banks_per_group = 4; rows = 65536; columns = 1024;
                 device_width = 8 bit; bus_width = 64 bit; burst_length = 8; }
  timing { tRCD = 22 cycles; tRP = 22 cycles; tRAS = 52 cycles; tRC = tRAS + tRP; }
  command ACT { scope = bank; opens = true; }
  command PRE { scope = bank; closes = true; }
  command RD { scope = bank; reads = [row]; }
  rules { rule bank: ACT -> RD = tRCD; rule bank: ACT -> PRE = tRAS; rule bank: PRE -> ACT = tRP;
          rule bank: ACT -> ACT = tRC; }
}
"""


def golden(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def test_language_md_mistake_1_misspelt_field(errors):
    assert errors("workload w { batch = 1; inptu_len = 5; }") == [golden("""
        spec.pim:1:25: error: unknown field 'inptu_len' in workload w
            workload w { batch = 1; inptu_len = 5; }
                                    ^^^^^^^^^
          hint: did you mean 'input_len' or 'std_input_len' or 'mean_input_len'?""")]


def test_language_md_mistake_2_wrong_dimension(errors):
    assert errors("cpu c { peak { fp16 = 1 TFLOPS; } memory_bandwidth = 10 ns; }") == [golden("""
        spec.pim:1:54: error: a bandwidth was expected for 'memory_bandwidth', this is a time
            cpu c { peak { fp16 = 1 TFLOPS; } memory_bandwidth = 10 ns; }
                                                                 ^^^^^
          hint: write it with a unit of that kind, e.g. 68.264 GB/s""")]


def test_language_md_mistake_3_inconsistent_timing(errors):
    found = errors(DRAM.replace("tRC = tRAS + tRP;", "tRC = 60 cycles;"))
    assert found == [golden("""
        spec.pim:5:65: error: inconsistent timing: tRC = 60 cycles < tRAS + tRP = 74
              timing { tRCD = 22 cycles; tRP = 22 cycles; tRAS = 52 cycles; tRC = 60 cycles; }
                                                                            ^^^
          hint: a row cycle cannot be shorter than tRAS + tRP""")]


def test_language_md_mistake_4_address_map(errors):
    found = errors(DRAM + "memory m { part = D; address_map = [row, bank, column]; }\n")
    assert found == [golden("""
        spec.pim:12:36: error: the address map has no field for bank_group, but the organization has 4 bank_groups
            memory m { part = D; address_map = [row, bank, column]; }
                                               ^^^^^^^^^^^^^^^^^^^
          hint: list every level with more than one unit, most significant first""")]


def test_language_md_mistake_5_missing_semicolon(errors):
    assert errors("workload w {\n  batch = 1\n  input_len = 4;\n}\n") == [golden("""
        spec.pim:2:12: error: missing ';' at the end of the statement
              batch = 1
                       ^
          hint: end every `name = value` with ';'""")]


def first_lines(found):
    return [f.splitlines()[0] for f in found]


def test_unknown_name_did_you_mean(errors):
    found = errors(DRAM.replace("rule bank: ACT -> RD = tRCD;", "rule bank: ACT -> RD = tRCDD;"))
    assert first_lines(found) == ["spec.pim:9:34: error: unknown name 'tRCDD'"]
    assert "hint: did you mean 'tRCD'" in found[0]


def test_unknown_reference_did_you_mean(errors):
    found = errors(DRAM.replace("dram D {", "dram DDR4_base {") + "memory m { part = DDR4_bsae; }\n")
    assert first_lines(found) == ["spec.pim:12:19: error: unknown dram 'DDR4_bsae'"]
    assert "did you mean 'DDR4_base'" in found[0]


def test_field_set_twice(errors):
    assert first_lines(errors("workload w { batch = 1; batch = 2; }")) == [
        "spec.pim:1:25: error: 'batch' is set twice in workload w"]


def test_sub_block_declared_twice_in_one_body(errors):
    # a repeat used to merge into the first, its fields replacing the first's unchecked (a fuzzed
    # `size = 128 MT/s` in the first of two equal regions passed `pimc check`)
    found = errors("cpu c { peak { fp16 = 1 TFLOPS; } cache L2 { size = 1 MiB; } cache L2 { size = 2 MiB; } }")
    assert first_lines(found) == ["spec.pim:1:62: error: cache 'L2' is declared twice in cpu c"]
    assert "hint: the first is at spec.pim:1:35; merge them into one or rename one" in found[0]
    found = errors("cpu c { peak { fp16 = 1 TFLOPS; } peak { bf16 = 1 TFLOPS; } }")
    assert first_lines(found) == ["spec.pim:1:35: error: a 'peak' block is declared twice in cpu c"]


def test_a_derived_block_still_extends_its_bases_sub_block(errors):
    assert errors("cpu b { peak { fp16 = 1 TFLOPS; } cache L2 { size = 1 MiB; } }\n"
                  "cpu c : b { cache L2 { size = 2 MiB; } }") == []


def test_name_declared_twice(errors):
    assert first_lines(errors("workload w { batch = 1; }\nworkload w { batch = 2; }")) == [
        "spec.pim:2:1: error: 'w' is declared twice (first as workload at spec.pim:1:1)"]


def test_unknown_kind_and_block(errors):
    assert first_lines(errors("workfload w { batch = 1; }")) == [
        "spec.pim:1:1: error: unknown kind of block 'workfload'"]
    assert first_lines(errors("cpu c { peak { fp16 = 1 TFLOPS; } cahce L2 { size = 1 MiB; } }")) == [
        "spec.pim:1:35: error: a cpu has no 'cahce' block"]


def test_wrong_choice(errors):
    found = errors(DRAM.replace("family = ddr4;", "family = ddr9;"))
    assert first_lines(found) == ["spec.pim:2:12: error: 'ddr9' is not a valid family"]


def test_address_map_power_of_two_and_duplicates(errors):
    dram = DRAM.replace("bank_groups = 4;", "bank_groups = 3;")
    found = errors(dram + "memory m { part = D; address_map = [row, bank, bank_group, column]; }\n")
    assert first_lines(found) == [
        "spec.pim:12:36: error: the address map needs a power of two bank_groups, the organization has 3"]
    found = errors(DRAM + "memory m { part = D; address_map = [row, bank, bank_group, column, row]; }\n")
    assert first_lines(found) == ["spec.pim:12:36: error: 'row' appears 2 times in the address map"]


def test_capacity_mismatch(errors):
    found = errors(DRAM + "memory m { part = D; address_map = [row, bank, bank_group, column]; capacity = 16 GiB; }\n")
    assert first_lines(found) == [
        "spec.pim:12:80: error: the organization gives 8589934592 B (8 GiB), but capacity says 16 GiB"]


def test_region_overflow_and_overlap(errors):
    found = errors(DRAM + """memory m { part = D; address_map = [row, bank, bank_group, column];
  region a { size = 6 GiB; }
  region b { size = 4 GiB; }
  region c { offset = 1 GiB; size = 1 GiB; }
}
""")
    assert first_lines(found) == [
        "spec.pim:14:3: error: region 'b' ends at 10 GiB, past the memory's 8 GiB",
        "spec.pim:15:3: error: region 'c' overlaps region 'a'"]


def test_pim_unit_at_a_level_the_memory_lacks(errors):
    dram = DRAM.replace("bank_groups = 4;", "bank_groups = 1;")
    found = errors(dram + """memory m { part = D; address_map = [row, bank, column]; pim = p; }
pim_unit p { placement = bank_group; simd_width = 256 bit; dtype = fp16; }
""")
    assert first_lines(found) == [
        "spec.pim:12:63: error: PIM unit 'p' sits per bank_group, but this memory has no bank groups"]


def test_model_shapes_that_do_not_divide(errors):
    found = errors("model x { layers = 2; hidden = 100; heads = 3; kv_heads = 2; ffn = 8; vocab = 10; }")
    assert first_lines(found) == [
        "spec.pim:1:32: error: hidden = 100 is not divisible by heads = 3",
        "spec.pim:1:59: error: heads = 3 is not divisible by kv_heads = 2"]
    assert errors("model x { layers = 2; hidden = 100; heads = 3; head_dim = 32; ffn = 8; vocab = 10; }") == []


def test_missing_required_field(errors):
    assert first_lines(errors("model x { layers = 2; hidden = 64; heads = 2; vocab = 10; }")) == [
        "spec.pim:1:1: error: model x needs 'ffn' (a whole number)"]


def test_value_cycle(errors):
    assert first_lines(errors("workload w { batch = input_len; input_len = batch; }")) == [
        "spec.pim:1:14: error: 'batch' depends on itself (batch -> input_len -> batch)"]


def test_rule_names_an_undeclared_command(errors):
    found = errors(DRAM.replace("rule bank: ACT -> RD = tRCD;", "rule bank: ACT -> RDD = tRCD;"))
    assert first_lines(found) == ["spec.pim:9:11: error: timing rule names the undeclared command 'RDD'"]
    assert "did you mean 'RD'" in found[0]


def test_derivation_errors(errors):
    assert first_lines(errors("workload a : b { batch = 1; }\nworkload b : a { batch = 2; }")) == [
        "spec.pim:1:1: error: 'a' derives from itself (a : b : a)"]
    assert first_lines(errors("workload a { batch = 1; }\nmapping m : a { strategy = x; }")) == [
        "spec.pim:2:13: error: mapping 'm' cannot derive from workload 'a'"]


def test_warnings_for_values_nothing_reads(elaborate):
    spec, diags = elaborate(DRAM.replace("tRC = tRAS + tRP;", "tRC = tRAS + tRP; tXP = 8 cycles;")
                            + "workload w { let spare = 3; batch = 1; }\n")
    assert not diags.errors
    assert sorted(d.message for d in diags.warnings) == [
        "'spare' is set but nothing reads it",
        "timing parameter 'tXP' is declared but no timing rule uses it"]


def test_all_errors_of_a_file_in_one_run(errors):
    found = errors("""
        workload w { batch = 1 ms; inptu_len = 5; }
        model x { layers = 2; hidden = 100; heads = 3; ffn = 8; vocab = 10; }
        cpu c { peak { fp16 = 1 TFLOP; } }
    """)
    assert len(found) == 4


def test_negative_rule_latency(errors):
    found = errors(DRAM.replace("tRC = tRAS + tRP;", "tRC = tRAS + tRP; tCL = 10 cycles; tCWL = 12 cycles;")
                   .replace("rule bank: ACT -> ACT = tRC;", "rule bank: ACT -> ACT = tRC; rule rank: RD -> PRE = tCL - tCWL;"))
    assert first_lines(found) == ["spec.pim:10:63: error: a timing rule's latency cannot be negative"]


def test_timing_check_allows_jedec_rounding_of_a_sum(errors):
    # tRAS + tRP given in ns round up separately; tRC = ceil((tRAS + tRP) / tCK) may be one less.
    assert errors(DRAM.replace("tRC = tRAS + tRP;", "tRC = 73 cycles;")) == []


def test_a_timing_parameter_used_by_another_is_read(elaborate):
    spec, diags = elaborate("""
        pim_unit p { placement = bank; clock = 1 GHz; dtype = fp16; simd_width = 256 bit;
                     timing { tB = 3 * tA; tA = 2 cycles; } command X { scope = bank; data_cycles = tA; }
                     rules { rule bank: X -> X = tB; } }
    """)
    assert not diags.items, diags.render_all()
    assert spec.pim_units["p"].commands[0].data_cycles == 2


def test_language_md_shows_these_five_diagnostics_verbatim():
    import inspect
    from .conftest import ROOT
    language = (ROOT / "LANGUAGE.md").read_text()
    shown = re.findall(r"```text\n(.*?)\n```", language, re.S)
    source = inspect.getsource(inspect.getmodule(test_language_md_shows_these_five_diagnostics_verbatim))
    expected = [golden(g) for g in re.findall(r'golden\("""\n(.*?)"""\)\]', source, re.S)]
    assert shown == expected


def test_pim_rules_name_pim_or_dram_commands(errors):
    memory = DRAM + """
pim_unit p {
  placement = bank; simd_width = 256 bit; dtype = fp16;
  command MAC { scope = all_banks; reads = [row]; }
  rules { rule bank: ACT -> MAC = 3 cycles; rule bank: MAC -> PRX = 1 cycles; }
}
memory m { part = D; pim = p; address_map = [row, bank, bank_group, column]; }
"""
    found = errors(memory)
    assert len(found) == 1 and "timing rule names the undeclared command 'PRX'" in found[0]
    assert "did you mean 'PRE'" in found[0]


def test_controller_options_the_part_or_structure_cannot_run(errors):
    memory = ("memory m {{ part = D; address_map = [row, bank, bank_group, column]; "
              "controller {{ {} }} }}\n")
    found = errors(DRAM + memory.format("split_activate = true; data_clock_sync = true; write_drain = batch;"))
    # each at its field's value, in source order
    assert [f.splitlines()[0].split(":", 3)[2:] for f in found] == [
        ["99", " error: split_activate needs an ACT of bus_cycles = 2 and tAAD in D's timing"],
        ["123", " error: data_clock_sync needs tWCKPST (the data clock's postamble) in D's timing"],
        ["143", " error: write_drain = batch moves writes into per-bank command queues"]]
    assert found[2].splitlines()[-1] == "  hint: set queue_structure = per_bank, or write_drain = watermark"


def test_a_plain_number_in_a_timing_field_is_an_error(errors):
    """issue 31: `7` could be cycles or ns; a timing value says which."""
    found = errors(DRAM.replace("tRCD = 22 cycles;", "tRCD = 22;"))
    assert found[0] == golden("""
        spec.pim:5:19: error: a time or a cycle count was expected for 'tRCD', this is the plain number 22, with no unit
              timing { tRCD = 22; tRP = 22 cycles; tRAS = 52 cycles; tRC = tRAS + tRP; }
                              ^^
          hint: write e.g. `18 ns` or `22 cycles`""")

