// The rules behind step(), shared by state_machine.cpp (joining) and state_machine_run.cpp (running).
// Internal to the rendezvous library.
#pragma once

#include "rendezvous/state_machine.hpp"

namespace ddprun::rendezvous::rules {

using Actions = std::vector<Action>;

void on_hello(RendezvousState& state, const Hello& event, const Now& now, Actions& out);
void on_heartbeat(RendezvousState& state, const Heartbeat& event, const Now& now, Actions& out);
void on_failure(RendezvousState& state, const FailureReport& event, const Now& now, Actions& out);
void on_node_done(RendezvousState& state, const NodeDone& event, const Now& now, Actions& out);
void on_node_stopped(RendezvousState& state, const NodeStopped& event, const Now& now, Actions& out);
void on_round_ready(RendezvousState& state, const RoundReady& event, const Now& now, Actions& out);
void on_disconnected(RendezvousState& state, const Disconnected& event, const Now& now, Actions& out);
void on_tick(RendezvousState& state, const Now& now, Actions& out);
// Start failures (state_machine_start.cpp): this server's own node's, and a hello that says it cannot join
// (or comes after a start failure ended the job); true when the hello was handled so.
void on_cannot_start(RendezvousState& state, const CannotStart& event, Actions& out);
bool on_start_failure_hello(RendezvousState& state, const Hello& event, const Now& now, Actions& out);

// A node entry from an accepted hello (addresses, ports, join order; counted in joined_procs), not yet placed.
NodeEntry new_node(RendezvousState& state, const Hello& event);
// Stores a node under its connection (which must be free) and indexes its host (RendezvousState::by_host).
NodeEntry& add_node(RendezvousState& state, NodeEntry node);
// Refuses a hello: an error frame, the close, and a log line saying (to the operator only) what was wrong.
void refuse(ConnId conn, const std::string& why, const Hello& event, const RendezvousState& state, Actions& out);
// The version, MAC and MUNGE checks of a hello; "" when it passes, else the answer (no run-id oracle).
std::string check_auth(const RendezvousState& state, const Hello& event);
// The answer to a hello once the job has stopped or completed, or runs with a fixed size.
std::string closed_message(const RendezvousState& state);
// Resume after a server restart (state_machine_resume.cpp): a node's hello claiming the round it runs; a
// report while the round is being taken back (held, replayed once it runs: true); the deadline for the rest.
void on_resume_hello(RendezvousState& state, const Hello& event, const Now& now, Actions& out);
bool hold_while_adopting(RendezvousState& state, ConnId conn, const std::optional<Failure>& failure, const Now& now);
void check_adoption_deadline(RendezvousState& state, const Now& now, Actions& out);
// A resumable server's round started or was taken back: RememberRound, the round and each node's seat.
void remember_round(const RendezvousState& state, const ResumeClaim& round, Actions& out);
// A resumable server cut off from every node (state_machine_cut_off.cpp): a node's deadline that passes while
// every node is silent is not judged (true) until config.reconnect_grace; check_cut_off (on_tick) ends the
// suspicion once a node is heard again; a resume hello for a silent place of the running round takes it over.
bool suspect_own_link(RendezvousState& state, ConnId conn, const Now& now, Actions& out);
void check_cut_off(RendezvousState& state, const Now& now, Actions& out);
bool reconnect_into_running(RendezvousState& state, const Hello& event, const Now& now, Actions& out);
// The connection of a node silent since a cut closed (its agent gave it up; the heal delivered the reset): its
// place waits for its resume hello, judged by its deadlines as a silent node's (true), not lost at once.
// after_stall: this server was stopped just before, and the node that gave it up meanwhile comes back asking for
// one heartbeat timeout; any server keeps its place that long.
bool keep_place_of_silent(RendezvousState& state, ConnId conn, bool after_stall, const Now& now, Actions& out);
// node_lost for a node whose heartbeats stopped: remembered in untold_silent, for when it comes back asking.
void silent_node_lost(RendezvousState& state, ConnId conn, const std::string& why, const Now& now, Actions& out);
// node_lost for a node whose connection closed. A resumable server (ddprun-rendezvous) also remembers it in
// untold_silent while a round runs: its agent may have given this server up after a silence of its own (a
// lossy or one-way cut link: the agent aborts, the server reads a reset) and come back asking, within its
// reconnect timeout. Node 0's own server does so only on a `reset`: a node whose ddprun exited closes with a FIN
// and never asks, and node 0 does not wait for it.
void closed_node_lost(RendezvousState& state, ConnId conn, const std::string& why, bool reset, const Now& now,
                      Actions& out);
// A node of the job asks after it ended (a resume hello of the stopped round, or a hello saying the last round it ran,
// after_round): told the root cause, or that the job completed without it (true).
bool tell_the_silent(RendezvousState& state, const Hello& event, Actions& out);
// The host's etcd lease lapsing (state_machine_lease.cpp): from then on (each tick too) a node of the running round
// silent for lapse_silence is lost at once, not at its heartbeat timeout; lapse_deadline: when the next one would be.
void on_lease_standing(RendezvousState& state, const LeaseStanding& event, const Now& now, Actions& out);
void judge_round_while_lapsing(RendezvousState& state, const Now& now, Actions& out);
std::optional<Clock::time_point> lapse_deadline(const RendezvousState& state);

// Assigns node ranks (dynamic), rank offsets and the master address, and sends every node its assignment.
void start_round(RendezvousState& state, Actions& out);
// Starts a re-form: every node of the round is told to stop its workers and say `stopped` (on_node_stopped
// then starts the next round). membership: nodes joined, nothing failed.
void begin_reform(RendezvousState& state, Failure cause, const std::string& reason, bool membership, Actions& out);
// An elastic job's newcomer after the first round (on_hello): waits for, or triggers, the next round.
void admit_late_joiner(RendezvousState& state, const NodeEntry& node, const Now& now, Actions& out);
// When the waiting late joiners may re-form the running job (config.join_policy); nullopt: not by themselves.
std::optional<Clock::time_point> joiners_reform_at(const RendezvousState& state);
// on_tick: the waiting joiners' time has come (joiners_reform_at): the job re-forms with them.
void admit_waiting_joiners(RendezvousState& state, const Now& now, Actions& out);
// Records liveness: any message from a node proves it is alive.
void touch(RendezvousState& state, NodeEntry& node, const Now& now);
// Ends the job: root cause recorded, every connected node told to stop.
void stop_job(RendezvousState& state, Failure root_cause, const std::string& reason, Actions& out);
// A worker failed (or hung): the job restarts while max_restarts allows, else it stops with this cause.
void worker_failed(RendezvousState& state, Failure failure, Actions& out);
// The connections of the nodes placed in the current round (a late joiner that waits is not one).
std::vector<ConnId> round_conns(const RendezvousState& state);
// A node lost: its connection closed, its heartbeats stopped, or it sent what no agent sends.
void node_lost(RendezvousState& state, ConnId conn, const std::string& why, const Now& now, Actions& out);
// "" if a worker's ranks fit this node's place in the round, else why not.
std::string check_ranks(const RendezvousState& state, const NodeEntry& node, const Failure& failure);
// --hang-timeout: a node's view of its workers (state_machine_hang.cpp), and the inquiry's deadline.
void on_hang_report(RendezvousState& state, const HangReport& event, const Now& now, Actions& out);
void check_hang_deadline(RendezvousState& state, const Now& now, Actions& out);

}  // namespace ddprun::rendezvous::rules
