"""What a run records of the machine it ran on."""

from r3l.provenance import cpu_name, machine, machine_label

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC
stepping\t: 1

processor\t: 1
model name\t: another processor's block, not read
"""


def test_the_processor_is_named_with_its_family_and_model_where_the_name_alone_is_every_generation():
    assert cpu_name(EPYC) == "AMD EPYC (cpu family 26, model 2)"
    assert cpu_name("Hardware\t: BCM2835\n") == "BCM2835"  # an ARM board: a name, no family
    assert cpu_name("") == ""


def test_a_machine_record_reads_as_one_line():
    record = {"cpu": "AMD EPYC (cpu family 26, model 2)", "cores": 2, "gpus": [], "torch": "2.13.0+cpu"}
    assert machine_label(record) == "AMD EPYC (cpu family 26, model 2), 2 cores; torch 2.13.0+cpu"
    gpus = {**record, "cores": 16, "gpus": ["NVIDIA H200", "NVIDIA H200"], "transformers": "5.25.0"}
    assert machine_label(gpus) == (
        "AMD EPYC (cpu family 26, model 2), 16 cores, 2x NVIDIA H200; torch 2.13.0+cpu, transformers 5.25.0"
    )


def test_this_machine_is_recorded_with_the_libraries_that_compute():
    import torch

    here = machine()
    assert here["cpu"] and here["cores"] >= 1 and here["torch"] == torch.__version__
    assert len(here["gpus"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
