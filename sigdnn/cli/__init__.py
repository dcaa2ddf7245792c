"""The ``sigdnn`` command: run, inspect and validate graphs, list builders.

Exit status: 0 success, 1 a validation that failed, 2 any error, reported as
ONE line on stderr that names the file and says what to do (never a
traceback; ``SIGDNN_TRACEBACK=1`` shows one for an internal error). A bare
``sigdnn`` prints the help and exits 2, as argparse does for a missing
command: nothing ran, and a script must not take it for success.

Files are read through :mod:`sigdnn.io` (regular files only, sizes capped
before reading). Tables and progress use ``rich``, imported only when
something is shown, so ``import sigdnn`` stays light.

One module per command (``run``, ``inspect``, ``builders``, ``validate``,
``campaign``, ``import_graph``), each with ``add_parser`` (its options) and
its ``cmd_*`` function; what they share: ``options`` (argument types, the
parser class, the graph options), ``files`` (the files a command reads),
``backend`` (the executor a command prepares on), ``screen`` (stdout and
stderr) and ``failures`` (the one line an error is reported as). ``entry``
assembles the parser and runs a command.
"""

from sigdnn.cli.entry import build_parser, main
from sigdnn.cli.options import default_max_bytes

__all__ = ["build_parser", "default_max_bytes", "main"]
