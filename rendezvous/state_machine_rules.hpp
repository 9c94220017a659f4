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
void on_disconnected(RendezvousState& state, const Disconnected& event, const Now& now, Actions& out);
void on_tick(RendezvousState& state, const Now& now, Actions& out);

// Assigns node ranks (dynamic), rank offsets and the master address, and sends every node its assignment.
void start_round(RendezvousState& state, Actions& out);
// Records liveness: any message from a node proves it is alive.
void touch(RendezvousState& state, NodeEntry& node, const Now& now);
// Ends the job: root cause recorded, every connected node told to stop.
void stop_job(RendezvousState& state, Failure root_cause, const std::string& reason, Actions& out);

}  // namespace ddprun::rendezvous::rules
