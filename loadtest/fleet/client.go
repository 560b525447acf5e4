package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// client is the REST side of the fleet: login, device create, provision, delete.
// It speaks the ThingsBoard platform API, so it works against ThingsBoard too.
type client struct {
	base string // scheme://host:port, no trailing slash
	http *http.Client
	auth string // X-Authorization value: "Bearer <jwt>" or "ApiKey <key>"
	// timeout bounds each REST call.
	timeout time.Duration
}

// apiError is a non-2xx answer.
type apiError struct {
	method, path string
	status       int
	body         string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: status %d: %s", e.method, e.path, e.status, strings.TrimSpace(e.body))
}

// do sends body (nil: none) as JSON and decodes a 2xx answer into out (nil: ignored).
func (c *client) do(ctx context.Context, method, path string, body, out any) error {
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
	if c.auth != "" {
		req.Header.Set("X-Authorization", c.auth)
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
		return &apiError{method: method, path: strings.SplitN(path, "?", 2)[0], status: resp.StatusCode, body: string(b)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: unexpected answer: %w", method, strings.SplitN(path, "?", 2)[0], err)
		}
	}
	return nil
}

// login trades a user name and password for a JWT and keeps it for later calls.
func (c *client) login(ctx context.Context, user, password string) error {
	var tok struct{ Token string }
	if err := c.do(ctx, http.MethodPost, "/api/auth/login", map[string]string{"username": user, "password": password}, &tok); err != nil {
		return fmt.Errorf("cannot log in as %s: %w", user, err)
	}
	if tok.Token == "" {
		return fmt.Errorf("cannot log in as %s: the answer has no token", user)
	}
	c.auth = "Bearer " + tok.Token
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
func (c *client) provision(ctx context.Context, name, key, secret string) (string, error) {
	var res struct{ CredentialsValue, CredentialsType, Status, ErrorMsg string }
	err := c.do(ctx, http.MethodPost, "/api/v1/provision",
		map[string]string{"deviceName": name, "provisionDeviceKey": key, "provisionDeviceSecret": secret}, &res)
	if err != nil {
		return "", fmt.Errorf("cannot provision device %s: %w", name, err)
	}
	if res.Status != "SUCCESS" || res.CredentialsValue == "" {
		return "", fmt.Errorf("cannot provision device %s: %s %s", name, res.Status, res.ErrorMsg)
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
