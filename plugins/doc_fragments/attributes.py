"""The attributes every module of the collection documents alike (ansible-doc merges them into each module's own)."""


class ModuleDocFragment:
    # Every module: managed hosts are Linux servers; the modules need only Python 3.8+ and its standard library.
    DOCUMENTATION = r"""
attributes:
  platform:
    description: Target OS families it runs on.
    support: full
    platforms: posix
"""

    # The modules that only read the host: the same run in check mode, nothing to diff.
    READ_ONLY = r"""
attributes:
  check_mode:
    description: Reads only; runs the same in check mode.
    support: full
  diff_mode:
    description: Would show what the module changed.
    support: none
    details: It only reads, so there is never a change to show.
"""

    # The modules that return ansible_facts.
    FACTS = r"""
attributes:
  facts:
    description: Returns C(ansible_facts), which update the host's facts.
    support: full
"""
