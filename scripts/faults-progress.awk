# Progress lines from `go test -v` of the fault matrix (make faults): the
# cells run in parallel, so go test prints their --- PASS lines only at the
# end; this prints a line as each backend starts and as each cell logs its
# row (matrix_test.go's t.Log at the cell's end), with seconds since t0.
BEGIN { if (!t0) t0 = systime(); stamp("building the test, then the cells, several at once: a line as each ends") }
function stamp(msg) { printf "faults [%4ds] %s\n", systime() - t0, msg; fflush() }
/^=== (RUN|NAME|CONT|PAUSE) / { name = $3; sub(/^TestMatrix\/backends\//, "", name) }
/^=== RUN +TestMatrix\/backends\/[^\/]+$/ { stamp("start " name); next }
/^ +matrix_test\.go:[0-9]+: / { cells++; stamp("cell " cells " done: " name); next }
/^ *--- FAIL/ || /^(ok|FAIL)[ \t]/ || /^panic:/ { stamp($0) }
