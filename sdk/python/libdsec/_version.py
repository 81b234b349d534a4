# SPDX-License-Identifier: Apache-2.0
"""The SDK's version: the one place it is written.

libdsec.__version__ imports it, and pyproject.toml reads it through
setuptools' dynamic metadata ({attr = "libdsec._version.__version__"},
which setuptools resolves from this file's source without importing the
package).
"""

__version__ = "0.3.0"
