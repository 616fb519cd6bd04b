"""Miles' `miles.utils`, with `chat_template_utils` from tito_fast."""

import os

__path__.append(os.path.join(os.environ["MILES_DIR"], "miles", "utils"))  # type: ignore[name-defined]  # noqa: F821
