package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The layout check of the HTML report in a real browser (headless
// chromium, e.g. Debian's chromium package).
//
// By default it checks the report of the fixture (reportFixture), and is
// skipped when no chromium is installed. make report-screenshot runs it on
// a fresh report instead:
//
//	REPORT_HTML=path  check this file (chromium is then required)
//	REPORT_PNG=path   also write a screenshot of it, 1280 px wide
//	REPORT_PNG_HEIGHT=px  cut the screenshot at this height (default: the whole page);
//	                  "charts": just below the charts (before the fault matrix)

// layoutProbe is appended to a copy of the report: on load it writes the
// page's measurements into the DOM, where --dump-dom shows them. Elements
// inside a .scroll box may be wider than the page (the box scrolls); the
// outermost other elements reaching past the right edge are listed.
const layoutProbe = `<script>
addEventListener('load', function () {
  var d = document.documentElement, over = [], wide = new Set(), scrolling = 0;
  document.querySelectorAll('body *').forEach(function (e) {
    if (e.classList.contains('scroll') && e.scrollWidth > e.clientWidth) scrolling++;
    if (e.parentElement && e.parentElement.closest('.scroll')) return;
    var r = e.getBoundingClientRect();
    if (r.right > d.clientWidth + 0.5) {
      wide.add(e);
      if (wide.has(e.parentElement)) return; // name the outermost only
      over.push(e.tagName.toLowerCase() + (e.getAttribute('class') ? '.' + e.getAttribute('class') : '') +
        ' reaches x=' + Math.round(r.right) + ': ' + (e.textContent || '').replace(/\s+/g, ' ').slice(0, 60));
    }
  });
  var charts = document.querySelector('.charts'), answer = document.getElementById('answer');
  var top = function (e) { return e ? Math.floor(e.getBoundingClientRect().top + scrollY) : -1; };
  var bottom = function (e) { return e ? Math.ceil(e.getBoundingClientRect().bottom + scrollY) : -1; };
  var p = document.createElement('pre');
  p.id = 'layout-probe';
  p.textContent = JSON.stringify({scrollWidth: d.scrollWidth, clientWidth: d.clientWidth,
    scrollHeight: d.scrollHeight, chartsBottom: charts ? Math.ceil(charts.getBoundingClientRect().bottom + scrollY) : 0,
    answerBottom: bottom(answer), chartsTop: top(charts),
    scrollBoxesScrolling: scrolling, over: over.slice(0, 10)});
  document.body.appendChild(p);
});
</script>`

// layout is what layoutProbe measured.
type layout struct {
	ScrollWidth          int      `json:"scrollWidth"`
	ClientWidth          int      `json:"clientWidth"`
	ScrollHeight         int      `json:"scrollHeight"`
	ChartsBottom         int      `json:"chartsBottom"`
	AnswerBottom         int      `json:"answerBottom"` // -1: no answer block
	ChartsTop            int      `json:"chartsTop"`    // -1: no charts
	ScrollBoxesScrolling int      `json:"scrollBoxesScrolling"`
	Over                 []string `json:"over"`
}

var probeOut = regexp.MustCompile(`(?s)<pre id="layout-probe">(.*?)</pre>`)

// chromiumPath is the installed chromium, or "".
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// chromium runs headless chromium with a window width×height on file.
func chromium(t *testing.T, bin string, width, height int, file string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--disable-dev-shm-usage", "--no-first-run", "--user-data-dir=" + t.TempDir(),
		fmt.Sprintf("--window-size=%d,%d", width, height),
		"--run-all-compositor-stages-before-draw", "--virtual-time-budget=5000"}, args...)
	all = append(all, "file://"+file)
	cmd := exec.CommandContext(ctx, bin, all...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, stderr.Bytes())
	}
	return stdout.Bytes()
}

// measure loads html (with layoutProbe added) in a window of the given width.
func measure(t *testing.T, bin, html string, width int) layout {
	t.Helper()
	i := strings.LastIndex(html, "</body>")
	if i < 0 {
		t.Fatal("no </body> in the report")
	}
	probed := filepath.Join(t.TempDir(), "probed.html")
	if err := os.WriteFile(probed, []byte(html[:i]+layoutProbe+html[i:]), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := chromium(t, bin, width, 900, probed, "--dump-dom")
	m := probeOut.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("width %d: no measurement in chromium's DOM (%d bytes)", width, len(dom))
	}
	var l layout
	raw := strings.NewReplacer("&quot;", `"`, "&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(string(m[1]))
	if err := json.Unmarshal([]byte(raw), &l); err != nil {
		t.Fatalf("width %d: %v: %s", width, err, raw)
	}
	return l
}

// TestReportInChromium renders the report in headless chromium and fails
// on horizontal overflow of the page at 1280 and 760 px: wide tables must
// scroll inside their own box.
func TestReportInChromium(t *testing.T) {
	bin := chromiumPath()
	path := os.Getenv("REPORT_HTML")
	if bin == "" {
		if path != "" {
			t.Fatal("REPORT_HTML is set but no chromium is installed (Debian: apt-get install chromium)")
		}
		t.Skip("no chromium installed (Debian: apt-get install chromium)")
	}
	var html []byte
	if path != "" {
		var err error
		if path, err = filepath.Abs(path); err != nil {
			t.Fatal(err)
		}
		if html, err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	} else {
		var h bytes.Buffer
		if err := writeHTML(&h, reportFixture(t)); err != nil {
			t.Fatal(err)
		}
		html = h.Bytes()
	}
	var full layout
	for _, width := range []int{1280, 760} {
		l := measure(t, bin, string(html), width)
		t.Logf("width %d: page %d px wide (viewport %d), %d px high; %d table boxes scroll inside",
			width, l.ScrollWidth, l.ClientWidth, l.ScrollHeight, l.ScrollBoxesScrolling)
		if l.ScrollWidth > l.ClientWidth || len(l.Over) > 0 {
			t.Errorf("width %d: the page overflows horizontally: %d px wide in a %d px viewport; %s",
				width, l.ScrollWidth, l.ClientWidth, strings.Join(l.Over, "; "))
		}
		if width == 1280 {
			full = l
			checkFirstScreen(t, l)
		}
	}

	pngPath := os.Getenv("REPORT_PNG")
	if pngPath == "" || t.Failed() {
		return
	}
	height := full.ScrollHeight
	switch h := os.Getenv("REPORT_PNG_HEIGHT"); {
	case h == "charts" && full.ChartsBottom > 0:
		height = min(height, full.ChartsBottom+24)
	case h != "":
		n, err := strconv.Atoi(h)
		if err != nil || n <= 0 {
			t.Fatalf("REPORT_PNG_HEIGHT=%q: want a number of pixels or \"charts\"", h)
		}
		height = min(height, n)
	}
	if path == "" {
		path = filepath.Join(t.TempDir(), "report.html")
		if err := os.WriteFile(path, html, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	chromium(t, bin, 1280, height, path, "--screenshot="+shot)
	if err := shrinkPNG(shot, pngPath); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: 1280×%d, %d KB", pngPath, height, st.Size()/1024)
}

// checkFirstScreen fails unless a 1280×800 first screen holds the whole
// per-backend answer and the charts start within about two screens.
func checkFirstScreen(t *testing.T, l layout) {
	t.Helper()
	t.Logf("answer ends at y=%d, charts start at y=%d", l.AnswerBottom, l.ChartsTop)
	switch {
	case l.AnswerBottom < 0:
		t.Error("no #answer block in the report")
	case l.AnswerBottom > 800:
		t.Errorf("the per-backend answer ends at y=%d, below the first 800 px", l.AnswerBottom)
	}
	switch {
	case l.ChartsTop < 0:
		t.Error("no .charts in the report")
	case l.ChartsTop > 1600:
		t.Errorf("the charts start at y=%d, below 1600 px", l.ChartsTop)
	}
}

// shrinkPNG writes src to dst with a palette of its 256 most frequent
// colours (a report is text and flat colours: the rest are antialiasing
// shades, mapped to the nearest kept colour, no dithering) and the best
// compression.
func shrinkPNG(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	im, err := png.Decode(f)
	f.Close()
	if err != nil {
		return err
	}
	b := im.Bounds()
	count := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			count[color.RGBAModel.Convert(im.At(x, y)).(color.RGBA)]++
		}
	}
	cs := make([]color.RGBA, 0, len(count))
	for c := range count {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b color.RGBA) int {
		if n := cmp.Compare(count[b], count[a]); n != 0 {
			return n
		}
		return cmp.Compare(uint32(a.R)<<24|uint32(a.G)<<16|uint32(a.B)<<8|uint32(a.A), uint32(b.R)<<24|uint32(b.G)<<16|uint32(b.B)<<8|uint32(b.A))
	})
	pal := make(color.Palette, 0, 256)
	for _, c := range cs[:min(256, len(cs))] {
		pal = append(pal, c)
	}
	out := image.NewPaletted(b, pal)
	index := map[color.RGBA]uint8{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(im.At(x, y)).(color.RGBA)
			i, ok := index[c]
			if !ok {
				i = uint8(pal.Index(c))
				index[c] = i
			}
			out.SetColorIndex(x, y, i)
		}
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, out); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, buf.Bytes(), 0o644)
}
