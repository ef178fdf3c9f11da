"""The steps of nvcc's plan that nvcc does itself, without a command: the dependency file
(``-M``, ``-MD``: nvcc's filter over the preprocessor's output) and removing files."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..files import write_atomically
from ..plan import depfile
from ..plan.dryrun import Step
from ..plan.exit_codes import fatal_message
from ..plan.nvcc_args import dependency_options
from .handlers import Internal
from .task_records import StepFailed


class PlanInternal(Internal):
    def __init__(self, effective: Sequence[str], *, cwd: str, threaded: bool) -> None:
        self.options = dependency_options(effective)
        self.cwd = cwd
        self.threaded = threaded

    def depfile(self, step: Step) -> bytes | None:
        data = []
        for path in step.sources:
            with open(path, "rb") as handle:
                data.append(handle.read())
        names = depfile.collect_dependencies(data, nonsystem=self.options.nonsystem)
        text = depfile.format_depfile(names, options=self.options).encode("utf-8", "surrogateescape")
        if not step.outputs:
            return text
        try:
            write_atomically(os.path.join(self.cwd, step.outputs[0]), text)
        except OSError:
            message = f"Could not open output file {step.outputs[0]}"
            raise StepFailed(fatal_message(message, threaded=self.threaded)) from None
        return None

    def remove(self, step: Step) -> None:
        for word in step.argv[1:]:
            try:
                os.remove(os.path.join(self.cwd, word))
            except FileNotFoundError:
                pass  # nvcc removes files it may not have created, and says nothing
