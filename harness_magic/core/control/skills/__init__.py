"""Skills: reusable data workflows in ``SKILL.md`` folders, loaded by the model on demand.

* :mod:`.loader` reads skill folders (Agent Skills convention) safely: :func:`load_skills`, :class:`Skill`.
* :mod:`.rules` is the declarative verification vocabulary a skill's front matter may use.
* :mod:`.runtime` offers ``skills__load`` on a harness and applies a loaded skill's rules for the run.
"""

from harness_magic.core.control.skills.loader import (
    BUILTIN_SKILLS_DIR,
    MAX_SKILL_FILE_BYTES,
    Skill,
    SkillFileError,
    SkillSet,
    load_skills,
    parse_skill,
)
from harness_magic.core.control.skills.rules import RULE_KINDS, SkillRule, SkillRuleError
from harness_magic.core.control.skills.runtime import SKILLS_TOOL_NAME, SkillsRuntime, install_skills

__all__ = ["BUILTIN_SKILLS_DIR", "MAX_SKILL_FILE_BYTES", "Skill", "SkillFileError", "SkillSet", "load_skills",
           "parse_skill", "RULE_KINDS", "SkillRule", "SkillRuleError", "SKILLS_TOOL_NAME", "SkillsRuntime",
           "install_skills"]
