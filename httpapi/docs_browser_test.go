package httpapi

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
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
	return getUserResponse(ctx, t)
}

// getUserResponse returns the text of GET /api/auth/user's live response.
func getUserResponse(ctx context.Context, t *testing.T) string {
	t.Helper()
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

// authorizeOnPage fills the Authorize dialog's form of one security scheme
// (inputs in page order) and closes the dialog.
func authorizeOnPage(ctx context.Context, t *testing.T, scheme string, values ...string) {
	t.Helper()
	form := `//div[contains(@class,"auth-container")][.//h4/code[text()="` + scheme + `"]]`
	actions := []chromedp.Action[chromedp.Void]{
		chromedp.WaitVisible(chromedp.CSS(`.auth-wrapper .authorize`)),
		chromedp.Click(chromedp.CSS(`.auth-wrapper .authorize`)),
	}
	for i, v := range values {
		actions = append(actions, chromedp.SendKeys(chromedp.Search(`(`+form+`//input)[`+strconv.Itoa(i+1)+`]`), v))
	}
	actions = append(actions,
		chromedp.Click(chromedp.Search(form+`//button[@type="submit"]`)),
		chromedp.Click(chromedp.CSS(`.modal-ux .btn-done`)),
		chromedp.WaitNotPresent(chromedp.CSS(`.modal-ux`)))
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("authorize %s on the page: %v", scheme, err)
	}
}

// executeAgain presses Execute on GET /api/auth/user once more (after
// executeGetUser) and returns the new response's text.
func executeAgain(ctx context.Context, t *testing.T) string {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(getUserOp+` .btn-clear`)),
		chromedp.WaitNotPresent(chromedp.CSS(getUserOp+` .live-responses-table`)),
		chromedp.Click(chromedp.CSS(getUserOp+` .execute`)),
		chromedp.WaitVisible(chromedp.CSS(getUserOp+` .live-responses-table .response-col_status`)),
	); err != nil {
		t.Fatalf("execute again: %v", err)
	}
	return getUserResponse(ctx, t)
}

// TestDocsPageBrowserFailedLogin: a wrong password on the login form is tried
// once, not at every Execute (the account would be locked after a few), and
// the call's 401 on the page says why.
func TestDocsPageBrowserFailedLogin(t *testing.T) {
	n := startTestNode(t)
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.URL+docsPage)); err != nil {
		t.Fatal(err)
	}
	authorizeOnPage(ctx, t, "HttpLoginForm", engine.DemoTenantAdminEmail, "wrong")
	out := executeGetUser(ctx, t)
	for range 6 { // past SLUICE_LOGIN_MAX_FAILURES (5) had each been a login
		out = executeAgain(ctx, t)
	}
	if !strings.Contains(out, "401") || !strings.Contains(out, "login failed") || !strings.Contains(out, "Invalid username or password") {
		t.Fatalf("response on the page:\n%s", out)
	}
	n.tenant() // not locked: logs in
}

// TestDocsPageBrowserAPIKey: an API key alone authorizes the page's calls, its
// bare value as well as "ApiKey <value>".
func TestDocsPageBrowserAPIKey(t *testing.T) {
	n := startTestNode(t)
	ctx := browser(t)
	var key engine.APIKey
	n.decode(n.expect("POST", "/api/apiKey", n.tenant(), map[string]any{"description": "docs page", "enabled": true}, 200, ""), &key)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.URL+docsPage)); err != nil {
		t.Fatal(err)
	}
	authorizeOnPage(ctx, t, "ApiKeyForm", *key.Value)
	out := executeGetUser(ctx, t)
	if !strings.Contains(out, "200") || !strings.Contains(out, `"email": "`+engine.DemoTenantAdminEmail+`"`) || !strings.Contains(out, "X-Authorization: ApiKey ") {
		t.Fatalf("response on the page:\n%s", out)
	}
}

// TestDocsPageBrowserUnicodePassword: a password past Latin-1, which
// window.btoa cannot encode, logs in from the page.
func TestDocsPageBrowserUnicodePassword(t *testing.T) {
	n := startTestNode(t)
	ctx := browser(t)
	const password = "пароль-€-密码"
	n.expect("POST", "/api/auth/changePassword", n.tenant(), map[string]string{"currentPassword": "tenant", "newPassword": password}, 200, "")
	if err := chromedp.Do(ctx, chromedp.Navigate(n.URL+docsPage)); err != nil {
		t.Fatal(err)
	}
	authorizeOnPage(ctx, t, "HttpLoginForm", engine.DemoTenantAdminEmail, password)
	out := executeGetUser(ctx, t)
	if !strings.Contains(out, "200") || !strings.Contains(out, `"email": "`+engine.DemoTenantAdminEmail+`"`) {
		t.Fatalf("response on the page:\n%s", out)
	}
}

// TestDocsPageBrowserMainUITokenRenewed: a main UI token within 10 s of its
// expiry is renewed with the main UI's refresh token, never by a login with the
// page's placeholder password.
func TestDocsPageBrowserMainUITokenRenewed(t *testing.T) {
	n := startTestNode(t, func(c *engine.Config) { c.AccessTokenTTL = 9 * time.Second })
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(n.URL+docsPage)); err != nil {
		t.Fatal(err)
	}
	p := n.pair(n.expect("POST", "/api/auth/login", "", map[string]string{"username": engine.DemoTenantAdminEmail, "password": "tenant"}, 200, ""))
	token, _ := json.Marshal(p.Token)
	refresh, _ := json.Marshal(p.RefreshToken)
	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem("jwt_token", `+string(token)+`); localStorage.setItem("refresh_token", `+string(refresh)+`)`),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(getUserOp)),
	); err != nil {
		t.Fatalf("open the page with a main UI token: %v", err)
	}
	out := executeGetUser(ctx, t)
	if !strings.Contains(out, "200") || !strings.Contains(out, `"email": "`+engine.DemoTenantAdminEmail+`"`) || strings.Contains(out, p.Token) {
		t.Fatalf("response on the page (want 200 with a renewed token):\n%s", out)
	}
}
