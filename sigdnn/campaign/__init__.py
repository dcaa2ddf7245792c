"""Validation campaigns: thousands of graphs x shapes x dtypes x seeds x engines, spread over Ray.

A TOML spec (:mod:`.spec`) expands into cases (:mod:`.cases`, graphs from
:mod:`.recipes` or files); :mod:`.runner` judges them on a Ray cluster
(:mod:`.judge` per case, the reference cached per graph digest and seed),
writes rows as they finish and failing cases as replayable files
(:mod:`.results`), shrinks failing shapes (:mod:`.shrink`) and summarizes
(:mod:`.summary`). Ray is imported only when a campaign runs
(``pip install 'sigdnn[campaign]'``).
"""

from sigdnn.campaign.spec import Spec, SpecError, load_spec, parse_spec

__all__ = ["Spec", "SpecError", "load_spec", "parse_spec"]
