package httpapi

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluice-iot/sluice/engine"
)

// chromiumPath is where Debian's chromium package installs the browser.
const chromiumPath = "/usr/bin/chromium"

// browser starts a headless Chromium for the test. It skips the test when Chromium
// is missing, unless SLUICE_REQUIRE_SERVICES=1 (CI), where that is a failure.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("SLUICE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("%s is required (apt-get install -y chromium): %v", chromiumPath, err)
		}
		t.Skipf("%s not installed (apt-get install -y chromium)", chromiumPath)
	}
	// The flags keep a machine without internet from hanging on update checks,
	// sign-in, QUIC probes and first-run pages.
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1024),
	)
	ctx, cancelBrowser := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelBrowser(); cancelAlloc() })
	// Script errors of the page go to the test log: they explain a failed step.
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok && e.ExceptionDetails != nil {
			d := e.ExceptionDetails
			if d.Exception != nil {
				t.Logf("page exception: %s %s", d.Text, d.Exception.Description)
			} else {
				t.Logf("page exception: %s", d.Text)
			}
		}
	}); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	return ctx
}

// getUserOp is GET /api/auth/user on the page (tag Auth, operationId getUser).
const getUserOp = `#operations-Auth-getUser`

// executeGetUser opens GET /api/auth/user, runs it with "Try it out" → Execute and
// returns the text of the live response.
func executeGetUser(ctx context.Context, t *testing.T) string {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(getUserOp+` .opblock-summary-control`)),
		chromedp.Click(chromedp.CSS(getUserOp+` .try-out__btn`)),
		chromedp.Click(chromedp.CSS(getUserOp+` .execute`)),
		chromedp.WaitVisible(chromedp.CSS(getUserOp+` .live-responses-table .response-col_status`)),
	); err != nil {
		t.Fatalf("execute GET /api/auth/user on the page: %v", err)
	}
	out, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(getUserOp+` .responses-wrapper`)))
	if err != nil {
		t.Fatalf("read the response on the page: %v", err)
	}
	return out
}

// TestDocsPageBrowser drives the documentation page in Chromium: "/" leads to it,
// Authorize takes a username and password, and a call made with Try it out answers
// 200 with the user. A bogus API key is authorized as well, so the call succeeds
// only because the JWT takes precedence over it.
func TestDocsPageBrowser(t *testing.T) {
	n := startTestNode(t)
	ctx := browser(t)
	// One form per security scheme in the Authorize dialog; Authorize is its submit button.
	scheme := func(name, then string) chromedp.Search {
		return chromedp.Search(`//div[contains(@class,"auth-container")][.//h4/code[text()="` + name + `"]]` + then)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(n.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`.auth-wrapper .authorize`)),
		chromedp.Click(chromedp.CSS(`.auth-wrapper .authorize`)),
		chromedp.SendKeys(scheme("HttpLoginForm", `//input[@name="username"]`), engine.DemoTenantAdminEmail),
		chromedp.SendKeys(scheme("HttpLoginForm", `//input[@name="password"]`), "tenant"),
		chromedp.Click(scheme("HttpLoginForm", `//button[@type="submit"]`)),
		chromedp.SendKeys(scheme("ApiKeyForm", `//input`), "ApiKey tb_bogus"),
		chromedp.Click(scheme("ApiKeyForm", `//button[@type="submit"]`)),
		chromedp.WaitVisible(scheme("ApiKeyForm", `//h6[text()="Authorized"]`)),
		chromedp.Click(chromedp.CSS(`.modal-ux .btn-done`)),
		chromedp.WaitNotPresent(chromedp.CSS(`.modal-ux`)),
	); err != nil {
		t.Fatalf("authorize on the page: %v", err)
	}
	out := executeGetUser(ctx, t)
	for _, want := range []string{"200", `"email": "` + engine.DemoTenantAdminEmail + `"`, "X-Authorization: Bearer "} {
		if !strings.Contains(out, want) {
			t.Fatalf("response on the page lacks %q:\n%s", want, out)
		}
	}
}

// TestDocsPageBrowserMainUIToken checks that a token the main UI left in
// localStorage.jwt_token authorizes the page without asking.
func TestDocsPageBrowserMainUIToken(t *testing.T) {
	n := startTestNode(t)
	ctx := browser(t)
	token := strings.TrimPrefix(n.tenant(), "Bearer ")
	quoted, err := json.Marshal(token)
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(n.URL+docsPage),
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem("jwt_token", `+string(quoted)+`)`),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(getUserOp)),
	); err != nil {
		t.Fatalf("open the page with a main UI token: %v", err)
	}
	out := executeGetUser(ctx, t)
	if !strings.Contains(out, "200") || !strings.Contains(out, `"email": "`+engine.DemoTenantAdminEmail+`"`) {
		t.Fatalf("response on the page:\n%s", out)
	}
}
