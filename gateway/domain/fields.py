"""Constrained field types for request bodies: no value the database would refuse.

Postgres refuses a NUL character in text and a number past its column's integer type, and
refuses it with an error the gateway could only answer with a 500. These types make msgspec
refuse such a value first, as a 400 that names the field; a ``varchar(n)`` column's ``n``
is the matching string's maximum length.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

NO_NUL = r"^[^\x00]*$"
# And not blank: the services refuse a name that is only whitespace.
NAMED = r"^[^\x00]*[^\x00\s][^\x00]*$"
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

Name = Annotated[str, msgspec.Meta(max_length=200, pattern=NAMED)]
ModelName = Annotated[str, msgspec.Meta(max_length=200, pattern=NO_NUL)]
GroupName = Annotated[str, msgspec.Meta(max_length=300, pattern=NO_NUL)]
Email = Annotated[str, msgspec.Meta(max_length=320, pattern=NO_NUL)]
# Only ever hashed, never stored; the cap keeps a megabyte "password" from costing a hash.
Password = Annotated[str, msgspec.Meta(max_length=1024)]
# Limit columns: requests and concurrency are INTEGER, token counts BIGINT. A limit is
# positive (null is none; 0 would refuse every request), as check_limit_values says too.
Int32 = Annotated[int, msgspec.Meta(ge=1, le=INT32_MAX)]
Int64 = Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)]
# A count kept in an INTEGER column that may be zero (tokens used, a position).
Count32 = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
