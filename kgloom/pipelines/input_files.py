"""The partitions of the asset graph: one dynamic partition per input file.

Keys are input paths relative to the input folder, in POSIX form (see
:mod:`kgloom.corpus.partitions`). They are added and deleted by ``input_folder_sensor``, by
``kgloom index`` / ``kgloom partitions``, or by hand
(``DagsterInstance.add_dynamic_partitions("input_files", [...])``).
"""

import dagster as dg

INPUT_FILES = "input_files"

input_files_partitions = dg.DynamicPartitionsDefinition(name=INPUT_FILES)


def live_partition_keys(instance: dg.DagsterInstance) -> list[str]:
    """Return the input-file partition keys currently registered in ``instance``."""
    return sorted(instance.get_dynamic_partitions(INPUT_FILES))
