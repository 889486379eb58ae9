"""Chat templates: allowed by construction, trial-rendered in a sandbox, pinned by digest.

:mod:`.check` is the check; :mod:`.policy` applies the allow-lists of :mod:`.allow` node by
node with the data-flow of :mod:`.flow` and the cost bounds of :mod:`.cost` over the tree of
:mod:`.walk`; :mod:`.render` renders in the sandbox, with :mod:`.cpp`'s rules for what
llama.cpp's own engine reads otherwise. The modules share helpers among themselves; other
packages use only the names below.
"""

from __future__ import annotations

from specbundle.scan.templates.check import TemplateCheck, analyse_template, template_changes
from specbundle.scan.templates.render import TrialEnvironment, trial_render

__all__ = ["TemplateCheck", "TrialEnvironment", "analyse_template", "template_changes",
           "trial_render"]
