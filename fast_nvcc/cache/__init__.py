"""7. The per-step cache: cudafe++, cicc, ptxas and the host compile, each keyed on all it
depends on, with no daemon.  ``fast_nvcc cache stats|clear`` is its command line.

What a key covers, and why:

* the tool binary (real path, size, mtime) and nvcc's (its headers and libdevice come along);
* the command line, with temporary names normalised: nvcc's names change with every run and
  with the set of architectures (``-8_k.compute_80.cpp1.ii`` vs ``-7_k.cpp1.ii``).  For cicc,
  cudafe++ and ptxas every temp path becomes a numbered placeholder, because their outputs are
  text, where a name can be rewritten on the way back, or ptxas's cubin, which embeds none
  (measured).  The host compile embeds its input's name in the object (the STT_FILE symbol,
  debug info), so its names stay in the key and only the pid part (same length) is rewritten;
* the content of every file the step reads, the .cpp1.ii, the .ptx, the module_id, and for the
  host compile the stub and the .fatbin.c that the .cudafe1.cpp #includes;
* the plan's variables (but PATH: the tool is identified by its binary) and the caller's
  variables that change what a compiler does (LANG, CPATH, SOURCE_DATE_EPOCH, ...);
* the working directory, except for ptxas, whose only paths are temporary, and for a host
  compile none of whose options lets the object depend on it (below).

What a key leaves out, and why:

* how fast_nvcc's own output is captured (stdout and stderr apart, or one file as on a
  terminal): a report flag such as ``--summary ... 2>&1`` must not change any key.  The entry
  says how its output was captured; an entry captured apart replays onto one file unless one
  step wrote to both streams (their interleaving is lost), and one captured as one file
  replays apart only when it is empty.  Anything else is a miss, and the step's new entry
  replaces it;
* the host compile's object name (``-o a.o`` vs ``-o b.o``) and the working directory, unless
  one of its options lets them reach the object or make files named after it (``-g``,
  ``-gsplit-dwarf``, ``--coverage``, ``-fprofile-*``, ``-flto``, ``-save-temps``, gcc's ``-M``
  flags, ...: ``NAME_REACHES``; measured with gcc 12 in tests/cache/test_cache.py).

Preprocessing always runs: its output is part of the key.  A hit writes the outputs and replays
the step's stdout and stderr, so warnings come back as they were.  Entries are written to a
temporary file and renamed, carry a BLAKE2 checksum, and a corrupt or unreadable entry is a miss
(and is removed), never a wrong object.  An SQLite index keeps sizes, last use and per-tool
hit/miss counts; past FAST_NVCC_CACHE_SIZE the least recently used entries go.

Keys are :mod:`.keys`'s, the entries and their index :mod:`.store`'s; :mod:`.handlers` holds
the handlers through which the scheduler runs cached steps, and :mod:`.cli` the command line.
"""
