package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/limenhq/limen/gateway/store"
)

var botsMigrations = []store.Migration{
	{Version: 1, SQL: `CREATE TABLE IF NOT EXISTS bots (
	name    TEXT PRIMARY KEY,
	traits  TEXT NOT NULL,
	created INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS secrets (
	id        TEXT PRIMARY KEY,
	bot       TEXT NOT NULL REFERENCES bots(name) ON DELETE CASCADE,
	hash      BLOB NOT NULL,
	expires   INTEGER NOT NULL,
	uses_left INTEGER NOT NULL,
	by        TEXT NOT NULL
)`},
}

// Bots is the bots driver over bots.db.
type Bots struct{ db *sql.DB }

// OpenBots opens (creating and migrating) the bot file at path.
func OpenBots(ctx context.Context, path string) (*Bots, error) {
	db, err := open(ctx, path, "bots", botsMigrations, options{foreignKeys: true})
	if err != nil {
		return nil, fmt.Errorf("open bot store %s: %w", path, err)
	}
	return &Bots{db: db}, nil
}

func (s *Bots) Close() error { return s.db.Close() }

func (s *Bots) Insert(ctx context.Context, b store.BotRecord) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO bots (name, traits, created) VALUES (?, ?, ?)`, b.Name, b.Traits, b.Created)
	if isUnique(err) {
		return store.ErrExists
	}
	return err
}

func (s *Bots) Delete(ctx context.Context, name string) error {
	return affected(s.db.ExecContext(ctx, `DELETE FROM bots WHERE name = ?`, name))
}

func (s *Bots) Get(ctx context.Context, name string) (store.BotRecord, error) {
	var b store.BotRecord
	err := s.db.QueryRowContext(ctx, `SELECT name, traits, created FROM bots WHERE name = ?`, name).Scan(&b.Name, &b.Traits, &b.Created)
	if errors.Is(err, sql.ErrNoRows) {
		return b, store.ErrNotFound
	}
	return b, err
}

func (s *Bots) List(ctx context.Context) ([]store.BotRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, traits, created FROM bots ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.BotRecord{}
	for rows.Next() {
		var b store.BotRecord
		if err := rows.Scan(&b.Name, &b.Traits, &b.Created); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

func (s *Bots) InsertSecret(ctx context.Context, r store.SecretRecord) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO secrets (id, bot, hash, expires, uses_left, by) VALUES (?, ?, ?, ?, ?, ?)`,
		r.ID, r.Bot, r.Hash, r.Expires, r.UsesLeft, r.By)
	if err != nil && strings.Contains(err.Error(), "FOREIGN KEY") {
		return store.ErrNotFound
	}
	return err
}

func (s *Bots) UpdateSecret(ctx context.Context, id string, fn func(*store.SecretRecord) error) error {
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock first
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var r store.SecretRecord
	err = tx.QueryRowContext(ctx, `SELECT id, bot, hash, expires, uses_left, by FROM secrets WHERE id = ?`, id).
		Scan(&r.ID, &r.Bot, &r.Hash, &r.Expires, &r.UsesLeft, &r.By)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	before := r
	if err := fn(&r); err != nil {
		return err
	}
	if r.UsesLeft != before.UsesLeft || r.Expires != before.Expires {
		if _, err := tx.ExecContext(ctx, `UPDATE secrets SET uses_left = ?, expires = ? WHERE id = ?`, r.UsesLeft, r.Expires, id); err != nil {
			return err
		}
	}
	return tx.Commit()
}
