package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sluice-iot/sluice/loadtest"
)

// client is the REST side of the fleet: login, device create, provision, delete.
// It speaks the ThingsBoard platform API, so it works against ThingsBoard too.
type client struct {
	base string // scheme://host:port and the path prefix of -url, no trailing slash
	http *http.Client
	// timeout bounds each REST call.
	timeout time.Duration

	mu   sync.Mutex
	auth string // X-Authorization value: "Bearer <jwt>" or "ApiKey <key>"
	// refresh, user and password renew an expired JWT (ThingsBoard's and
	// Sluice's last 9000 s by default: a long run outlives the login).
	refresh, user, password string
	// renewing serializes renewals, so that the calls that all got 401 at once
	// renew the token once.
	renewing sync.Mutex
}

// Retries of a REST call (retry): how many attempts in all, and the first wait
// without a Retry-After (doubled at each attempt). Variables for the tests.
var (
	retryAttempts = 4
	retryBase     = 500 * time.Millisecond
)

// apiError is a non-2xx answer.
type apiError struct {
	method, path string
	status       int
	body         string
	retryAfter   time.Duration // the answer's Retry-After (0: none)
	// afterUnsure: an earlier attempt of this call failed without saying that
	// it did nothing (a 503, or no answer), so the call may have taken effect
	// even though this answer is a 4xx (a create retried after its device was
	// made is refused as a duplicate).
	afterUnsure bool
	// refused: a 2xx answer whose body refuses the call (a provision answered
	// {"status":"NOT_FOUND"} or FAILURE): body then holds that status and message.
	refused bool
}

func (e *apiError) Error() string {
	if e.refused {
		return fmt.Sprintf("%s %s: refused: %s", e.method, e.path, strings.TrimSpace(e.body))
	}
	return fmt.Sprintf("%s %s: status %d: %s", e.method, e.path, e.status, strings.TrimSpace(e.body))
}

// setAuth sets the X-Authorization value of later calls.
func (c *client) setAuth(auth string) {
	c.mu.Lock()
	c.auth = auth
	c.mu.Unlock()
}

// authHeader is the X-Authorization value calls send now ("" without a login).
func (c *client) authHeader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.auth
}

// do sends body (nil: none) as JSON and decodes a 2xx answer into out (nil:
// ignored), with retries (retry). A 401 to a call made with a JWT renews the
// token (refresh, or log in again) and tries the call once more: the token
// expires in a long run, and cleanup at its end must still work. API keys do not
// expire that way.
func (c *client) do(ctx context.Context, method, path string, body, out any) error {
	return c.retry(ctx, idempotent(method), func() error { return c.doOnce(ctx, method, path, body, out) })
}

func (c *client) doOnce(ctx context.Context, method, path string, body, out any) error {
	auth := c.authHeader()
	err := c.send(ctx, method, path, auth, body, out)
	var ae *apiError
	if !errors.As(err, &ae) || ae.status != http.StatusUnauthorized || !strings.HasPrefix(auth, "Bearer ") {
		return err
	}
	if rerr := c.renew(ctx, auth); rerr != nil {
		return fmt.Errorf("%w (and the expired login could not be renewed: %v)", err, rerr)
	}
	return c.send(ctx, method, path, c.authHeader(), body, out)
}

// idempotent tells the methods whose call may be repeated after it got no
// answer: doing it twice is doing it once. A POST is not (a create that got no
// answer may have made its device).
func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// retry runs call up to retryAttempts times while it fails with a 429 or a 503
// (a target under load, or restarting, says "later"), or, when idempotent, with
// no answer. It waits between attempts for the answer's Retry-After (at most
// loadtest.MaxRetryAfter), or retryBase doubled at each attempt. A ctx that ends
// (Ctrl-C) ends the waits; the last error is returned.
func (c *client) retry(ctx context.Context, idempotent bool, call func() error) error {
	unsure := false
	for attempt := 1; ; attempt++ {
		err := call()
		var ae *apiError
		isAPI := errors.As(err, &ae)
		if isAPI && unsure {
			ae.afterUnsure = true
		}
		if err == nil || attempt >= retryAttempts || ctx.Err() != nil {
			return err
		}
		wait := retryBase << (attempt - 1)
		switch {
		case isAPI && (ae.status == http.StatusTooManyRequests || ae.status == http.StatusServiceUnavailable):
			if ae.retryAfter > 0 {
				wait = min(ae.retryAfter, loadtest.MaxRetryAfter)
			}
			// A 429 says the call was not taken; a 503 from a proxy may come
			// after the server did it.
			unsure = unsure || ae.status == http.StatusServiceUnavailable
		case !isAPI && idempotent && noAnswer(err):
			unsure = true
		default:
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// noAnswer tells a failure to get an answer (a refused or dropped connection,
// a timeout of the call) from one of the answer (a body that is not JSON).
func noAnswer(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue)
}

// send is one call with the X-Authorization value auth ("" for none).
func (c *client) send(ctx context.Context, method, path, auth string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if auth != "" {
		req.Header.Set("X-Authorization", auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// The path may hold a device token: name the route, not the request.
		ae := &apiError{method: method, path: strings.SplitN(path, "?", 2)[0], status: resp.StatusCode, body: string(b)}
		ae.retryAfter, _ = loadtest.RetryAfter(resp.Header.Get("Retry-After"), time.Now())
		return ae
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: unexpected answer: %w", method, strings.SplitN(path, "?", 2)[0], err)
		}
	}
	return nil
}

// tokenPair is the answer of a login or a refresh.
type tokenPair struct {
	Token        string `json:"token"`
	RefreshToken string `json:"refreshToken"`
}

// login trades a user name and password for a JWT and keeps it for later calls,
// with what renews it.
func (c *client) login(ctx context.Context, user, password string) error {
	var pair tokenPair
	// A login changes nothing on the server: it may be repeated after no answer.
	err := c.retry(ctx, true, func() error {
		return c.send(ctx, http.MethodPost, "/api/auth/login", "", map[string]string{"username": user, "password": password}, &pair)
	})
	if err != nil {
		return fmt.Errorf("cannot log in as %s: %w", user, err)
	}
	if pair.Token == "" {
		return fmt.Errorf("cannot log in as %s: the answer has no token", user)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.auth, c.refresh, c.user, c.password = "Bearer "+pair.Token, pair.RefreshToken, user, password
	return nil
}

// renew replaces the JWT that stale (an X-Authorization value) carried, unless
// another call already did: with the refresh token (POST /api/auth/token), or,
// when that is refused too, by logging in again.
func (c *client) renew(ctx context.Context, stale string) error {
	c.renewing.Lock()
	defer c.renewing.Unlock()
	c.mu.Lock()
	auth, refresh, user, password := c.auth, c.refresh, c.user, c.password
	c.mu.Unlock()
	if auth != stale {
		return nil // renewed while this call waited
	}
	var errs []error
	if refresh != "" {
		var pair tokenPair
		err := c.send(ctx, http.MethodPost, "/api/auth/token", "", map[string]string{"refreshToken": refresh}, &pair)
		if err == nil && pair.Token != "" {
			c.mu.Lock()
			c.auth = "Bearer " + pair.Token
			if pair.RefreshToken != "" {
				c.refresh = pair.RefreshToken
			}
			c.mu.Unlock()
			return nil
		}
		if err == nil {
			err = errors.New("the refresh answer has no token")
		}
		errs = append(errs, fmt.Errorf("cannot refresh the login: %w", err))
	}
	if user == "" {
		return errors.Join(append(errs, errors.New("no user and password to log in again"))...)
	}
	if err := c.login(ctx, user, password); err != nil {
		return errors.Join(append(errs, err)...)
	}
	return nil
}

type entityID struct {
	ID string `json:"id"`
}

// createDevice creates a device with the access token and returns its id.
func (c *client) createDevice(ctx context.Context, name, deviceType, token string) (string, error) {
	var dev struct{ ID entityID }
	err := c.do(ctx, http.MethodPost, "/api/device?accessToken="+url.QueryEscape(token),
		map[string]string{"name": name, "type": deviceType}, &dev)
	if err != nil {
		return "", fmt.Errorf("cannot create device %s: %w", name, err)
	}
	if dev.ID.ID == "" {
		return "", fmt.Errorf("cannot create device %s: the answer has no id", name)
	}
	return dev.ID.ID, nil
}

// provision provisions a device named name with a device profile's key and secret
// and returns its access token.
//
// A 2xx answer whose status is not SUCCESS (NOT_FOUND for an unknown key or
// secret, FAILURE for a refused device) says the device was not made: the error
// is then an *apiError with refused set (notMade), unless an earlier attempt of
// the call got a 503 (afterUnsure: it may have made the device, and the retry is
// refused as a duplicate). A SUCCESS without credentials made a device whose
// token is unknown: that error leaves it unsure.
func (c *client) provision(ctx context.Context, name, key, secret string) (string, error) {
	const path = "/api/v1/provision"
	body := map[string]string{"deviceName": name, "provisionDeviceKey": key, "provisionDeviceSecret": secret}
	var res struct{ CredentialsValue, CredentialsType, Status, ErrorMsg string }
	// As do, with the answer's status checked inside the retries, so that a
	// refusal after a 503 is marked afterUnsure like a 4xx would be.
	err := c.retry(ctx, idempotent(http.MethodPost), func() error {
		res.CredentialsValue, res.CredentialsType, res.Status, res.ErrorMsg = "", "", "", ""
		if err := c.doOnce(ctx, http.MethodPost, path, body, &res); err != nil {
			return err
		}
		if res.Status != "SUCCESS" {
			return &apiError{method: http.MethodPost, path: path, status: http.StatusOK, body: strings.TrimSpace(res.Status + " " + res.ErrorMsg), refused: true}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("cannot provision device %s: %w", name, err)
	}
	if res.CredentialsValue == "" {
		return "", fmt.Errorf("cannot provision device %s: SUCCESS without credentials", name)
	}
	return res.CredentialsValue, nil
}

// deviceID looks a device of the tenant up by name.
func (c *client) deviceID(ctx context.Context, name string) (string, error) {
	var dev struct{ ID entityID }
	if err := c.do(ctx, http.MethodGet, "/api/tenant/devices?deviceName="+url.QueryEscape(name), nil, &dev); err != nil {
		return "", fmt.Errorf("cannot find device %s: %w", name, err)
	}
	return dev.ID.ID, nil
}

// deleteDevice deletes the device with id.
func (c *client) deleteDevice(ctx context.Context, id string) error {
	if err := c.do(ctx, http.MethodDelete, "/api/device/"+url.PathEscape(id), nil, nil); err != nil {
		return fmt.Errorf("cannot delete device %s: %w", id, err)
	}
	return nil
}
