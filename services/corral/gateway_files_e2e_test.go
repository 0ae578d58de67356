package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/credential"
	"corral.dev/pkg/credentialtest"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// filesScript reads the file a session was given: "show" runs cat of
// /workspace/in/data.csv, and answers with what it printed.
func filesScript(c modeltest.Conversation) (modeltest.Turn, error) {
	after, last := 0, ""
	for _, m := range c.Messages {
		if m.Role == "assistant" {
			after++
		}
		for _, r := range m.Results {
			last = r.Content
		}
	}
	if after == 0 {
		return modeltest.Turn{Text: "Reading it.", Calls: []modeltest.Call{{Name: "Bash", Input: map[string]any{"command": "cat /workspace/in/data.csv"}}}}, nil
	}
	return modeltest.Turn{Text: "The data: " + strings.TrimSpace(last)}, nil
}

// TestGatewayFilesWithTheSDK drives the Files API with the official Go
// SDK against corral dev and the model fake: a file uploaded, shown,
// listed and downloaded; a session created with it as a resource, whose
// model reads it in /workspace at its mount path; what Corral cannot
// honour refused; another tenant's key finding none of it on any
// endpoint; and the file deleted.
func TestGatewayFilesWithTheSDK(t *testing.T) {
	api := natstest.FreeAddr(t)
	p := startDev(t, filesScript, map[string]string{"CORRAL_GATEWAY_LISTEN": api})
	nc, err := p.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	admin, _ := jetstream.New(nc)
	key := func(tenant, user string, role credential.Role) string {
		c, secret := credentialtest.Issue(t, admin, tenant, user, role)
		return c.ID + ":" + secret
	}
	ada := sdkClient(api, key("acme", "ada", credential.RoleUser))
	ivan := sdkClient(api, key("initech", "ivan", credential.RoleUser))
	ctx := context.Background()
	// corral dev may be up before its API listens.
	natstest.WaitFor(t, 10*time.Second, func() error {
		c, err := net.Dial("tcp", api)
		if err == nil {
			c.Close()
		}
		return err
	})

	const data = "a,b\n1,2\n"
	f, err := ada.Beta.Files.Upload(ctx, anthropic.BetaFileUploadParams{File: anthropic.File(strings.NewReader(data), "data.csv", "text/csv"),
		Betas: []anthropic.AnthropicBeta{anthropic.AnthropicBetaFilesAPI2025_04_14}})
	if err != nil {
		t.Fatalf("upload a file: %v", err)
	}
	if !strings.HasPrefix(f.ID, "file_") || f.Filename != "data.csv" || f.MimeType != "text/csv" || f.SizeBytes != int64(len(data)) || !f.Downloadable {
		t.Errorf("uploaded: %s", f.RawJSON())
	}
	if got, err := ada.Beta.Files.GetMetadata(ctx, f.ID, anthropic.BetaFileGetMetadataParams{}); err != nil || got.ID != f.ID || got.ExpiresAt.IsZero() {
		t.Errorf("metadata: %v %+v", err, got)
	}
	var listed []string
	for g := range ada.Beta.Files.ListAutoPaging(ctx, anthropic.BetaFileListParams{Limit: anthropic.Int(1)}).All() {
		listed = append(listed, g.ID)
	}
	if len(listed) != 1 || listed[0] != f.ID {
		t.Errorf("ada's files: %v, want %s", listed, f.ID)
	}
	resp, err := ada.Beta.Files.Download(ctx, f.ID, anthropic.BetaFileDownloadParams{})
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != data {
		t.Errorf("downloaded %q, %v; want %q", got, err, data)
	}

	agent, err := ada.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
		Name: "reader", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "openai:gpt-test"},
		Tools: []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{Type: "agent_toolset_20260401"}}},
	})
	if err != nil {
		t.Fatalf("make an agent: %v", err)
	}
	ofAgent := anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}
	fileAt := func(id, mount string) anthropic.BetaSessionNewParamsResourceUnion {
		return anthropic.BetaSessionNewParamsResourceUnion{OfFile: &anthropic.BetaManagedAgentsFileResourceParams{FileID: id, Type: "file", MountPath: anthropic.String(mount)}}
	}

	// Refused: a path outside /workspace, and files with a repository.
	_, err = ada.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: ofAgent, Resources: []anthropic.BetaSessionNewParamsResourceUnion{fileAt(f.ID, "/mnt/session/uploads/data.csv")}})
	if ae := wantAPIError(t, "a file mounted outside /workspace", err, http.StatusBadRequest, "invalid_request_error"); !strings.Contains(ae.RawJSON(), "not supported") {
		t.Errorf("the refusal says %s", ae.RawJSON())
	}
	_, err = ada.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: ofAgent, Resources: []anthropic.BetaSessionNewParamsResourceUnion{
		fileAt(f.ID, "/workspace/in/data.csv"),
		{OfGitHubRepository: &anthropic.BetaManagedAgentsGitHubRepositoryResourceParams{Type: "github_repository", URL: "https://github.com/acme/app"}},
	}})
	if ae := wantAPIError(t, "files with a repository", err, http.StatusBadRequest, "invalid_request_error"); !strings.Contains(ae.RawJSON(), "not supported") {
		t.Errorf("the refusal says %s", ae.RawJSON())
	}

	// A session with the file: the model reads it where it was mounted.
	sess, err := ada.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: ofAgent, Resources: []anthropic.BetaSessionNewParamsResourceUnion{fileAt(f.ID, "/workspace/in/data.csv")}})
	if err != nil {
		t.Fatalf("create a session with the file: %v", err)
	}
	st := openStream(t, ada, sess.ID)
	if _, err := ada.Beta.Sessions.Events.Send(ctx, sess.ID, anthropic.BetaSessionEventSendParams{Events: []anthropic.BetaManagedAgentsEventParamsUnion{say("show the data")}}); err != nil {
		t.Fatalf("send a message: %v", err)
	}
	var answer string
	for _, ev := range st.until(t, 60*time.Second, idle("end_turn")) {
		if v, ok := ev.AsAny().(anthropic.BetaManagedAgentsAgentMessageEvent); ok {
			for _, c := range v.Content {
				answer = c.Text
			}
		}
	}
	if !strings.Contains(answer, "a,b\n1,2") {
		t.Errorf("answer %q, want the file's content read from /workspace/in/data.csv", answer)
	}

	// Another tenant's key finds none of it, on any endpoint.
	theirs, err := ivan.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "reader", Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "openai:gpt-test"}})
	if err != nil {
		t.Fatalf("make initech's agent: %v", err)
	}
	for what, call := range map[string]func() error{
		"get its metadata": func() error {
			_, err := ivan.Beta.Files.GetMetadata(ctx, f.ID, anthropic.BetaFileGetMetadataParams{})
			return err
		},
		"download it": func() error {
			resp, err := ivan.Beta.Files.Download(ctx, f.ID, anthropic.BetaFileDownloadParams{})
			if err == nil {
				resp.Body.Close()
			}
			return err
		},
		"delete it": func() error {
			_, err := ivan.Beta.Files.Delete(ctx, f.ID, anthropic.BetaFileDeleteParams{})
			return err
		},
		"start a session with it": func() error {
			_, err := ivan.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(theirs.ID)}, Resources: []anthropic.BetaSessionNewParamsResourceUnion{fileAt(f.ID, "/workspace/x")}})
			return err
		},
	} {
		wantAPIError(t, "initech's key: "+what, call(), http.StatusNotFound, "not_found_error")
	}
	if page, err := ivan.Beta.Files.List(ctx, anthropic.BetaFileListParams{}); err != nil || len(page.Data) != 0 {
		t.Errorf("initech's files: %v %v, want none", err, page)
	}

	// Deleted, it is gone.
	if d, err := ada.Beta.Files.Delete(ctx, f.ID, anthropic.BetaFileDeleteParams{}); err != nil || d.ID != f.ID || d.Type != "file_deleted" {
		t.Fatalf("delete: %v %+v", err, d)
	}
	_, err = ada.Beta.Files.GetMetadata(ctx, f.ID, anthropic.BetaFileGetMetadataParams{})
	wantAPIError(t, "a deleted file", err, http.StatusNotFound, "not_found_error")
}
