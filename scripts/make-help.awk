# `make help`: every public target, from the rule lines of the Makefile and mk/*.mk (in that order) that end
# in "## [ARGS | ]what it does", printed as "make TARGET ARGS   what it does". A target make help leaves out
# says why on its rule line: "## internal: why". tests/docs/test_make_help.py holds every .PHONY target to one
# of the two.
/^[a-zA-Z0-9_.-]+:([^=]|$).*## / {
  target = substr($0, 1, index($0, ":") - 1)
  text = substr($0, index($0, "## ") + 3)
  if (text ~ /^internal:/) next
  usage = "make " target
  if ((bar = index(text, " | ")) > 0) {
    usage = usage " " substr(text, 1, bar - 1)
    text = substr(text, bar + 3)
  }
  if (FILENAME != shown && shown != "") print ""  # a blank line between makefiles
  shown = FILENAME
  if (length(usage) < 42) printf "%-42s %s\n", usage, text
  else printf "%s\n%42s %s\n", usage, "", text  # a long usage: the text on the next line, in its column
}
