"""What every subpackage uses, importing nothing else of fa-shim: the one error type and its
boundary (one message per failure), stderr logging, whole-or-nothing writes, helper programs."""
