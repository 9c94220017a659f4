#include "rendezvous/server_live_view.hpp"

namespace ddprun::rendezvous {

void ServerLiveView::on_status(std::uint64_t conn, int node_rank, const std::string& host, NodeStatusMsg status,
                               Clock::time_point now) {
  statuses_[conn] = Entry{std::move(status.status), now};
  if (node_rank >= 0) stragglers_.report(node_rank, host, std::move(status.paces));
}

void ServerLiveView::forget(std::uint64_t conn, int node_rank) {
  statuses_.erase(conn);
  if (node_rank >= 0) stragglers_.forget_node(node_rank);
}

std::optional<StragglersMsg> ServerLiveView::tick(Clock::time_point now) {
  if (judged_at_ && now - *judged_at_ < kJudgeEvery) return std::nullopt;
  judged_at_ = now;
  if (!stragglers_.judge(now)) return std::nullopt;
  return StragglersMsg{stragglers_.named()};
}

JobViewMsg ServerLiveView::job_view(std::size_t max_frame_bytes, Clock::time_point now) const {
  JobViewMsg view;
  std::size_t bytes = 64;
  for (const auto& [conn, entry] : statuses_) {
    bytes += entry.status.size() * 2 + 32;  // JSON escaping of the text at most doubles it
    if (bytes > max_frame_bytes) break;
    view.nodes.push_back(entry.status);
    view.ages_ms.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(now - entry.at).count());
  }
  return view;
}

}  // namespace ddprun::rendezvous
