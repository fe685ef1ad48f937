"""The appliance around the services: what `make up` / `make train` ask veri before compose starts
(the job's stack settings, the GPU layout plan), and the user commands about jobs."""
