"""tito_fast in place of Miles' TITO pieces (a test shim; see tools/miles_tests/run.py).

Only `miles.utils.chat_template_utils` comes from here; every other Miles
module is read from the checkout named by $MILES_DIR.
"""

import os

__path__.append(os.path.join(os.environ["MILES_DIR"], "miles"))  # type: ignore[name-defined]  # noqa: F821
