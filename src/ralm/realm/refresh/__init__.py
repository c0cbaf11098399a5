"""The MIPS index REALM searches while it trains, and its refresh: in the loop, in a background process, sharded over ranks."""
